"""`probe view`: a local, read-only web viewer over a runs directory (the one `probe runs` reads).

Runs (live while they are written), a run's verdicts, rates and case x arm grid, one case's
outputs grouped by identical text, any two arms side by side (discordant cases first), why
phrases as filters, and each case's incident file. Every page renders a view object of
promptprobe.views (the same objects `probe report` and `probe compare` print) and is also JSON at
its URL plus `.json`. See docs/viewer.md.
"""

import ipaddress
import re
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError

DEFAULT_HOST = "127.0.0.1"
HOST_NAME = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,252}[A-Za-z0-9_])?")


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


@dataclass
class Listening:
    """A viewer bound to its address, not serving yet: its URL, the Host names it answers and, when
    it listens beyond loopback, the sentence that says what that exposes."""

    server: Any  # viewer.server.ViewerServer
    sock: socket.socket
    url: str
    hosts: list[str]
    exposed: str | None

    def run(self) -> int | None:
        """Serve until stopped; the signal that stopped it (None when none did)."""
        self.server.run(sockets=[self.sock])
        return self.server.stopped_by


def host_names(host: str, address: str, allow: Sequence[str] = ()) -> list[str]:
    """The Host names the viewer answers: the host as given, the address it listens on,
    `localhost` on a loopback address, and the names allowed with --allow-host."""
    names = [host, address] + (["localhost"] if ipaddress.ip_address(address).is_loopback else [])
    names += [checked_name(name) for name in allow]
    return list(dict.fromkeys(name.strip("[]").lower() for name in names))


def checked_name(name: str) -> str:
    """A name given with --allow-host; InputError when it is not a host name or an IP address."""
    if not HOST_NAME.fullmatch(name) and not _is_ip(name.strip("[]")):
        raise InputError(f"--allow-host {name!r}: give a host name or an IP address (no port, no wildcard)")
    return name


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def exposure(address: str, port: int, runs_dir: Path, hosts: Sequence[str]) -> str | None:
    """What listening on `address` exposes, in one sentence; None on a loopback address."""
    if ipaddress.ip_address(address).is_loopback:
        return None
    where = "every address of this machine" if ipaddress.ip_address(address).is_unspecified else address
    return (
        f"warning: serving beyond this machine on {where}, port {port}: anyone who can reach it reads "
        f"every run in {runs_dir} (outputs, questions, retrieved passages); a request is answered only "
        f"when its Host names {', '.join(hosts)} or is an IP address, so a web page cannot "
        "read it through a DNS name pointed here (DNS rebinding) unless --allow-host names that DNS name"
    )


def listen(
    runs_dir: str | Path, host: str = DEFAULT_HOST, port: int = 8000, allow_hosts: Sequence[str] = ()
) -> Listening:
    """The viewer bound to host:port, answering only requests whose Host names it (OSError when the
    address cannot be had)."""
    import uvicorn

    from .app import create_app
    from .server import ViewerServer

    for name in allow_hosts:
        checked_name(name)  # before anything listens
    sock = listening_socket(host, port)
    bound = sock.getsockname()
    shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
    hosts = host_names(host, bound[0], allow_hosts)
    # Beyond loopback a client names the machine by one of its IP addresses: an IP literal cannot be
    # rebound to another machine, a DNS name can (so only the names allowed are answered).
    any_ip = not ipaddress.ip_address(bound[0]).is_loopback
    app = create_app(runs_dir, hosts=hosts, port=bound[1], any_ip=any_ip)
    server = ViewerServer(uvicorn.Config(app, log_level="warning", lifespan="on"))
    url = f"http://{shown}:{bound[1]}/"
    return Listening(server, sock, url, hosts, exposure(bound[0], bound[1], Path(runs_dir), hosts))


def serve(
    runs_dir: str | Path,
    host: str = DEFAULT_HOST,
    port: int = 8000,
    on_ready: Callable[[str], None] | None = None,
    allow_hosts: Sequence[str] = (),
    on_exposed: Callable[[str], None] | None = None,
) -> int | None:
    """Serve the viewer until interrupted (uvicorn) and return the signal that stopped it;
    `on_exposed(sentence)` is called when it listens beyond loopback and `on_ready(url)` once it
    listens (a port that cannot be had raises OSError before anything is served)."""
    listening = listen(runs_dir, host, port, allow_hosts)
    if listening.exposed and on_exposed is not None:
        on_exposed(listening.exposed)
    if on_ready is not None:
        on_ready(listening.url)
    return listening.run()
