"""A long output is shown in time linear in its length and cut for display (issue 37, item 4):
`probe show` and the viewer's case page show its first DISPLAY_BYTES with a mark saying how much
that is and where the whole of it is; short outputs render exactly as before."""

import json
import random
import unicodedata

import pytest
from click.testing import CliRunner
from conftest import ROOT, write_probeset
from servers import LocalServer, Reply

from promptprobe.cli import main
from promptprobe.config import load_config
from promptprobe.engine.run import RunOptions, run_probe
from promptprobe.jsonio import read_jsonl
from promptprobe.models import parse_model_spec
from promptprobe.pack import read_raw
from promptprobe.probeset import load_probeset
from promptprobe.prompts import load_prompt
from promptprobe.views.outputs import _markers
from promptprobe.views.show import DISPLAY_BYTES, NAMED, visible, visible_pieces

pytest.importorskip("starlette")
from starlette.testclient import TestClient  # noqa: E402

from promptprobe.viewer.app import create_app  # noqa: E402

# A 3-byte character straddles the cut; a zero-width space lies past it.
LONG = "[[ANSWER]]\n" + "a" * (DISPLAY_BYTES - 12) + "你好" + "word 世界 " * 20_000 + "\u200bend\n"


@pytest.fixture(scope="module")
def long_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("long")
    probeset = load_probeset(write_probeset(tmp / "p.toml", [("long", "q long", None)]))
    with LocalServer(lambda request: Reply(LONG)) as server:
        run = run_probe(probeset, [load_prompt(ROOT / "prompts" / "always-header.md")],
                        [parse_model_spec(f"openai:m@{server.url}/v1")], load_config(None),
                        RunOptions(runs_dir=tmp / "runs")).path
    (record,) = read_jsonl(run / "samples.jsonl")
    data = read_raw(run, record)
    assert data == LONG.encode()
    return run, data


def test_probe_show_cuts_a_long_output_and_says_where_the_exact_bytes_are(long_run):
    run, data = long_run
    shown = CliRunner().invoke(main, ["show", str(run)])
    assert shown.exit_code == 0, shown.output
    body = shown.output.split("\n", 1)[1]
    kept = DISPLAY_BYTES - 1  # the cut falls before 你, not inside it
    assert kept == len(("[[ANSWER]]\n" + "a" * (DISPLAY_BYTES - 12)).encode())
    mark = (f"⟨cut for display: the first {kept:,} of {len(data):,} bytes are shown; the whole output: "
            f"probe export {run} --sample long.r1.a1 (its exact bytes)⟩")
    shown_part = visible(data[:kept].decode(), ended=False) + "\n" + mark + "\n"
    assert body.startswith(shown_part)  # then the provenance of its arm
    assert body[len(shown_part):].lstrip("\n").startswith("== provenance")
    assert "ZWSP" not in body and "␄" not in body
    exported = CliRunner().invoke(main, ["export", str(run), "--sample", "long.r1.a1", "--format", "json"])
    assert exported.exit_code == 0
    import base64

    (case,) = json.loads(exported.stdout)["cases"]
    assert base64.b64decode(case["arms"][0]["groups"][0]["raw_base64"]) == data  # every byte


def test_the_viewer_case_page_cuts_a_long_output_and_links_the_exact_bytes(long_run):
    run, data = long_run
    kept = DISPLAY_BYTES - 1
    with TestClient(create_app(run.parent, warm=False), base_url="http://127.0.0.1") as client:
        view = client.get(f"/runs/{run.name}/cases/long.json?arm=1").json()
        group = view["sides"][0]["outputs"]["groups"][0]
        assert group["cut"] == {"shown": kept, "bytes": len(data)}
        assert group["text"] == data[:kept].decode()
        assert group["segments"][-1] == [
            f"cut for display: the first {kept:,} of {len(data):,} bytes are shown; the whole output: the exact bytes",
            "inv",
        ]
        page = client.get(f"/runs/{run.name}/cases/long?arm=1").text
        assert f"Cut for display: the first {kept:,} of {len(data):,} bytes are shown." in page
        link = f'/runs/{run.name}/raw/long.r1.a1?arm=1&amp;case=long" download>The whole output (exact bytes)</a>'
        assert link in page
        assert client.get(f"/runs/{run.name}/raw/long.r1.a1?arm=1&case=long").content == data


def reference_pieces(text: str) -> list[tuple[str, str]]:
    """visible_pieces as it was written first, a character at a time (quadratic, exact)."""
    pieces: list[tuple[str, str]] = []

    def add(piece: str, kind: str) -> None:
        if pieces and kind == "text" and pieces[-1][1] == "text":
            pieces[-1] = (pieces[-1][0] + piece, kind)
        elif piece:
            pieces.append((piece, kind))

    for number, line in enumerate(text.split("\n")):
        if number:
            add("\n", "text")
        carriage = line.endswith("\r")
        core = line[:-1] if carriage else line
        body = core.rstrip(" ")
        for char in body:
            if char == "\r":
                add("␍", "inv")
            elif char == "\t":
                add("→", "inv")
            elif "\udc80" <= char <= "\udcff":
                add(f"⟨byte 0x{ord(char) - 0xDC00:02X} not UTF-8⟩", "inv")
            elif char in NAMED or unicodedata.category(char) in ("Cf", "Cc", "Zl", "Zp", "Co", "Cn"):
                name = NAMED.get(char) or unicodedata.name(char, "")
                add(f"⟨U+{ord(char):04X}{' ' + name if name else ''}⟩", "inv")
            else:
                add(char, "text")
        add("·" * (len(core) - len(body)), "inv")
        if carriage:
            add("␍", "inv")
    if not text.endswith("\n"):
        add("␄", "inv")
    return pieces


def test_short_outputs_render_exactly_as_the_character_at_a_time_reading_did():
    alphabet = ["a", " ", "\r", "\n", "\t", "\ufeff", "\u200b", "你", "\udc80", "\udcff", "\u00a0", "\u3000",
                "\u2002", "\x00", "\x85", "\ue000", "\U000e0001", "\u0378", "`", "\u2028", "\x1b", "é"]
    rng = random.Random(37)
    for _ in range(1500):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        if rng.random() < 0.2:  # past one isprintable() run
            text = "ab" * rng.randint(120, 300) + text + "cd" * rng.randint(0, 200)
        assert visible_pieces(text) == reference_pieces(text), repr(text)
    assert visible("\ufeff[[NO_ANSWER]]\r\nNot covered.  \r\n你好\u200b") == (
        "⟨U+FEFF BOM⟩[[NO_ANSWER]]␍\nNot covered.··␍\n你好⟨U+200B ZWSP⟩␄")


def reference_markers(shown: str, markers: tuple[str, ...]) -> list[tuple[str, str]]:
    """Header markers found as they were first: every marker looked for again after each hit."""
    pieces, position = [], 0
    while True:
        hits = [(shown.find(m, position), m) for m in markers if m and shown.find(m, position) >= 0]
        if not hits:
            return pieces + [(shown[position:], "text")]
        at, marker = min(hits)
        pieces += [(shown[position:at], "text"), (marker, "marker")]
        position = at + len(marker)


def test_header_markers_are_found_as_before_in_one_pass():
    rng = random.Random(4)
    for _ in range(3000):
        text = "".join(rng.choice("[]AN x") for _ in range(rng.randint(0, 30)))
        markers = tuple(rng.choice(["[[A]]", "[[A", "[[N]]", "A]", "", "]]"]) for _ in range(rng.randint(0, 3)))
        assert _markers(text, markers) == reference_markers(text, markers), (text, markers)
