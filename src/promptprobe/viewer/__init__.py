"""`probe view`: a local, read-only web viewer over a runs directory (the one `probe runs` reads).

Runs (live while they are written), a run's verdicts, rates and case x arm grid, one case's
outputs grouped by identical text, any two arms side by side (discordant cases first), why
phrases as filters, and each case's incident file. Every page renders a view object of
promptprobe.views (the same objects `probe report` and `probe compare` print) and is also JSON at
its URL plus `.json`. See docs/viewer.md.
"""

import socket
from pathlib import Path

DEFAULT_HOST = "127.0.0.1"
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def listening_socket(host: str, port: int) -> socket.socket:
    """A socket bound to host:port and listening (OSError when the address cannot be had)."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def serve(runs_dir: str | Path, host: str = DEFAULT_HOST, port: int = 8000, on_ready: object = None) -> None:
    """Serve the viewer until interrupted (uvicorn); `on_ready(url)` is called once it listens
    (a port that cannot be had raises OSError before anything is served)."""
    import uvicorn

    from .app import create_app

    sock = listening_socket(host, port)
    bound = sock.getsockname()
    shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
    hosts = None if host in LOOPBACK else ["*"]
    server = uvicorn.Server(
        uvicorn.Config(create_app(runs_dir, hosts=hosts), log_level="warning", lifespan="on")
    )
    if on_ready is not None:
        on_ready(f"http://{shown}:{bound[1]}/")  # type: ignore[operator]
    server.run(sockets=[sock])
