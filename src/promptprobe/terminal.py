"""What reaches a terminal: text a model wrote (or a server, or a file) can hold control
sequences that a terminal acts on: OSC 52 writes the clipboard, OSC 0 retitles the window, CSI
(ESC [ or the single C1 byte 0x9b) moves the cursor and clears the screen. Everything probe
prints goes through `neutralised`, which spells each control character out as a JSON escape
(`\\u001b`): readable in a table, and in JSON output the very same string, still valid.

Names and specs a user gives (a model spec, an arm or prompt name, a probe set's name) must not
hold control characters at all: `control_problem` says why one is refused (exit 2).
"""

import re

# C0 controls but tab and newline, DEL, and the C1 controls (U+0080 to U+009F): a terminal in
# UTF-8 mode acts on C1 characters too. A CR just before a newline is a line ending (CSV's CRLF),
# which moves the cursor nowhere a newline would not.
CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]|\r(?!\n)")
# Select Graphic Rendition only (colours), which probe itself writes: ESC [ digits ; m.
COLOUR = re.compile(r"\x1b\[[0-9;]*m")
NAMES = {"\x1b": "ESC", "\x07": "BEL", "\x9b": "CSI", "\r": "CR", "\x00": "NUL", "\x7f": "DEL"}


def _escaped(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group(0)):04x}"


def neutralised(text: str, keep_colour: bool = False) -> str:
    """The text with every control character but tab, newline and CRLF spelled out as `\\uXXXX`;
    `keep_colour` leaves probe's own colour sequences (ESC [ ... m) alone."""
    if keep_colour and "\x1b" in text:
        parts = COLOUR.split(text)
        colours = COLOUR.findall(text)
        out = [CONTROL.sub(_escaped, parts[0])]
        for colour, part in zip(colours, parts[1:], strict=True):
            out += [colour, CONTROL.sub(_escaped, part)]
        return "".join(out)
    return CONTROL.sub(_escaped, text)


def control_problem(value: str, what: str) -> str | None:
    """`WHAT 'VALUE': holds a control character (ESC, U+001B) ...` when a name or spec holds one;
    None when it is plain text."""
    found = CONTROL.search(value) or re.search("[\t\n]", value)
    if found is None:
        return None
    char = found.group(0)
    name = NAMES.get(char) or {"\t": "TAB", "\n": "LF"}.get(char, "a control character")
    return (
        f"{what} {value!r} holds a control character ({name}, U+{ord(char):04X}); "
        "it must be plain text"
    )
