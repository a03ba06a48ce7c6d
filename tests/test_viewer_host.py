"""The viewer answers only a Host that names where it listens (issue 37, item 1): on every
--host, 127.0.0.2 too, so a web page cannot read the runs through a DNS name rebound to it; names
given with --allow-host are answered as well, and listening beyond loopback says what it exposes."""

import threading
import time
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from promptprobe.cli import main

pytest.importorskip("uvicorn")


def test_a_rebound_name_is_refused_on_a_loopback_host_other_than_the_default(tmp_path):
    from promptprobe.viewer import listen

    listening = listen(tmp_path, "127.0.0.2", 0, ["probe.internal"])
    assert listening.exposed is None  # loopback: nothing beyond this machine
    port = listening.sock.getsockname()[1]
    thread = threading.Thread(target=listening.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not listening.server.started:  # uvicorn sets it once it serves the socket
            assert thread.is_alive() and time.monotonic() < deadline
            time.sleep(0.02)

        def status(host: str) -> int:
            return httpx.get(f"{listening.url}.json", headers={"Host": host}).status_code

        assert listening.url == f"http://127.0.0.2:{port}/"
        assert status("rebind.evil.example") == 400  # issue 37: 200 on any --host but three names
        assert status(f"rebind.evil.example:{port}") == 400
        assert status(f"127.0.0.2.evil.example:{port}") == 400
        assert status(f"127.0.0.2:{port}") == 200
        assert status(f"probe.internal:{port}") == 200  # allowed by name
        assert status(f"PROBE.internal:{port}") == 200  # host names know no case
        assert status("probe.internal:1") == 400  # another port: not this viewer's name
    finally:
        listening.server.should_exit = True
        thread.join(timeout=10)


def test_listening_beyond_loopback_says_what_it_exposes_and_answers_ip_addresses_and_allowed_names():
    from promptprobe.viewer import exposure, host_names
    from promptprobe.viewer.app import HostCheck

    hosts = host_names("0.0.0.0", "0.0.0.0", ["probe.internal"])
    said = exposure("0.0.0.0", 8001, Path("runs"), hosts)
    assert said.startswith("warning: serving beyond this machine on every address of this machine, port 8001")
    assert "DNS rebinding" in said and "--allow-host" in said
    assert exposure("127.0.0.2", 8001, Path("runs"), hosts) is None
    check = HostCheck(None, hosts, 8001, any_ip=True)
    assert check.accepts("192.168.1.20:8001") and check.accepts("[fe80::1]:8001")
    assert check.accepts("probe.internal:8001")
    assert not check.accepts("rebind.evil.example:8001") and not check.accepts("192.168.1.20:9")
    assert not check.accepts("") and not check.accepts("[::1]x:8001")


def test_allow_host_takes_host_names_only(tmp_path):
    for name in ("*", "evil.example:8000", "a b", ""):
        result = CliRunner().invoke(main, ["view", str(tmp_path), "--port", "0", "--allow-host", name])
        assert result.exit_code == 2 and "--allow-host" in result.stderr, (name, result.output)
