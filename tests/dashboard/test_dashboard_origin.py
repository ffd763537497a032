"""DNS rebinding: a real `drifttool dashboard` server on 127.0.0.1 and a real WebSocket client:
a connection whose Host (or Origin) is a foreign name is refused at the handshake; a local one is accepted."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.support.capture import child_env

websockets = pytest.importorskip("websockets")
pytest.importorskip("streamlit")
from websockets.sync.client import connect  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(dash_traces):
    port = free_port()
    p = subprocess.Popen([sys.executable, "-m", "drifttool.cli", "dashboard", str(dash_traces["a"]), "--port", str(port)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=child_env())
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if p.poll() is not None or time.monotonic() > deadline:
                pytest.fail("the dashboard did not start")
            time.sleep(0.5)
        yield port
    finally:
        p.terminate()
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def handshake(port: int, host: str, origin: str | None) -> bool:
    """Open /_stcore/stream on 127.0.0.1 with `host` in the Host header (what a browser sends after DNS
    rebinding); True when the server accepts the WebSocket."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        with connect(f"ws://{host}:{port}/_stcore/stream", sock=sock, origin=origin, open_timeout=20,
                     subprotocols=["streamlit"]):
            return True
    except websockets.exceptions.InvalidStatus as e:
        assert e.response.status_code in (400, 403), e.response.status_code
        return False
    except (websockets.exceptions.InvalidHandshake, websockets.exceptions.ConnectionClosed, OSError):
        return False
    finally:
        sock.close()


def test_local_origin_is_accepted(server):
    assert handshake(server, "127.0.0.1", f"http://127.0.0.1:{server}")
    assert handshake(server, "localhost", f"http://localhost:{server}")


def test_rebound_host_is_refused(server):
    assert not handshake(server, "evil.example.com", f"http://evil.example.com:{server}")
    assert not handshake(server, "evil.example.com", None)


def test_foreign_origin_is_refused(server):
    assert not handshake(server, "127.0.0.1", f"http://evil.example.com:{server}")
