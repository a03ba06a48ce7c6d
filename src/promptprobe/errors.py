"""Domain errors. Each carries the exit code DESIGN.md gives it; the CLI prints the message."""


class ProbeError(Exception):
    """Base class: a problem the user can act on, shown as one sentence."""

    exit_code = 1


class InputError(ProbeError):
    """Bad input: probe set, prompt, config or flags (exit 2)."""

    exit_code = 2


class StartError(ProbeError):
    """The run could not start: missing key, target unreachable (exit 3)."""

    exit_code = 3
