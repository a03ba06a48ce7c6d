"""`probe view`: a local, read-only web viewer over a runs directory (the one `probe runs` reads).

Runs (live while they are written), a run's verdicts, rates and case x arm grid, one case's
outputs grouped by identical text, any two arms side by side (discordant cases first), why
phrases as filters, and each case's incident file. Every page renders a view object of
promptprobe.views (the same objects `probe report` and `probe compare` print) and is also JSON at
its URL plus `.json`. See docs/viewer.md.
"""

from pathlib import Path

DEFAULT_HOST = "127.0.0.1"
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def serve(runs_dir: str | Path, host: str = DEFAULT_HOST, port: int = 8000, on_ready: object = None) -> None:
    """Serve the viewer until interrupted (uvicorn); `on_ready(url)` is called once it listens."""
    import uvicorn

    from .app import create_app

    hosts = None if host in LOOPBACK else ["*"]
    app = create_app(runs_dir, hosts=hosts)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    if on_ready is not None:
        original = server.startup

        async def startup(sockets: object = None) -> None:
            await original(sockets=sockets)  # type: ignore[arg-type]
            if server.started:
                bound = server.servers[0].sockets[0].getsockname()
                shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
                on_ready(f"http://{shown}:{bound[1]}/")  # type: ignore[operator]

        server.startup = startup  # type: ignore[method-assign]
    server.run()
