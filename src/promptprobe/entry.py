"""The `probe` command: Ctrl-C from the very first instant exits 130, never 1 and never swallowed.

Python turns Ctrl-C into a KeyboardInterrupt wherever the main thread happens to be: inside an
import (a traceback, exit 1 through click's "Aborted!") or inside a finalizer (printed as
"Exception ignored" and lost, so the run went on). Until a run installs its own handler (the
first Ctrl-C finishes the run's manifest and prints how to resume), Ctrl-C here ends the process
at once: nothing has been written that needs finishing.
"""

import os
import signal
import sys


def _interrupted(signum: int, frame: object) -> None:
    os.write(2, b"interrupted\n")
    os._exit(128 + signum)


def main() -> None:
    # A probe started with Ctrl-C ignored (nohup, a background job) keeps ignoring it.
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, _interrupted)
    from . import collector

    collector.hold()  # until start-up is over (the cli releases it)
    from .cli import main as cli

    sys.exit(cli())


if __name__ == "__main__":
    main()
