"""promptprobe as an installed copy runs: its bytecode compiled once, as `pip install` compiles a
package. A machine with PYTHONDONTWRITEBYTECODE set (CI images, this one) never caches the
bytecode of an editable install, so without this every timed `probe` process would first
compile promptprobe's sources (0.1-0.2 s), which no installed copy does."""

import compileall
from pathlib import Path

import promptprobe


def compile_package() -> None:
    """Write promptprobe's bytecode (only what is out of date), quietly."""
    compileall.compile_dir(str(Path(promptprobe.__file__).parent), quiet=1)
