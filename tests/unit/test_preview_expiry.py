"""A preview link's bound holds for every conversation it carries, not only its first
request: a websocket piped, a body still streaming, a reply not yet started or a
kept-alive connection ends at the link's expiry, or promptly once the key that signed it
leaves the key ring. In-process, over the fake relay of preview_fakes."""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from openblox.preview import permits
from openblox.preview.permits import TICK_SECONDS, PermitWatch
from openblox.preview.relay import Tunnel
from openblox.preview.tokens import Grant, sign
from openblox.transport import ExecStreamError
from tests.unit.preview_fakes import (
    FakeBackend,
    LoopbackExec,
    echo_upgraded,
    serving_app,
    serving_proxy,
)

KEY = b"e" * 32
# How late past its bound a conversation may still be open: the watch wakes at the
# expiry itself, so this is scheduling and a loaded test machine, not design.
SLACK = 1.0
SLOW_REPLY_SECONDS = 4.0
SEEN: list[str] = []  # the targets the app was asked for, in order, across connections


class Streams(BaseHTTPRequestHandler):
    """An app that never finishes on its own: echo pipes, endless bodies, a slow reply."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *_: Any) -> None:
        pass

    def do_GET(self) -> None:
        SEEN.append(self.path)
        try:
            if self.path == "/ws":
                echo_upgraded(self)
            elif self.path == "/chunked":
                self._endless({"Transfer-Encoding": "chunked"}, b"5\r\ntick\n\r\n")
            elif self.path == "/events":
                # No length, no chunking: the body runs until the connection closes.
                self._endless({"Content-Type": "text/event-stream"}, b"data: tick\n\n")
            elif self.path == "/slow":
                time.sleep(SLOW_REPLY_SECONDS)
                self._reply(b"slow")
            else:
                self._reply(f"conn={id(self.connection)}".encode())
        except OSError:
            self.close_connection = True

    def do_POST(self) -> None:
        SEEN.append(self.path)
        with contextlib.suppress(OSError):  # a cut tunnel ends the body early
            self._reply(self.rfile.read(int(self.headers["Content-Length"])))

    def _reply(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _endless(self, headers: dict[str, str], tick: bytes) -> None:
        self.send_response(200)
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.close_connection = True
        while True:
            self.wfile.write(tick)
            self.wfile.flush()
            time.sleep(0.05)


@pytest.fixture
def app() -> Iterator[int]:
    SEEN.clear()
    with serving_app(Streams) as port:
        yield port


@pytest.fixture
def keys() -> dict[str, bytes]:
    """The proxy's key ring, which a test may change while the proxy runs."""
    return {"k1": KEY}


@pytest.fixture
def proxy(keys: dict[str, bytes]) -> Iterator[tuple[int, FakeBackend]]:
    with serving_proxy(lambda: keys) as served:
        yield served


def _soon() -> int:
    """An expiry (whole Unix seconds, as tokens carry it) between 1 and 2 s from now."""
    expires = int(time.time()) + 1
    return expires + 1 if expires - time.time() < 1.0 else expires


def _token(port: int, expires: int) -> str:
    return sign(Grant("ns", "sb", "uid", port, expires), "k1", KEY)


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=SLOW_REPLY_SECONDS + 2)


def _read_head(sock: socket.socket) -> bytes:
    head = b""
    while b"\r\n\r\n" not in head:
        data = sock.recv(4096)
        assert data, f"closed before a reply head: {head!r}"
        head += data
    return head


def _upgraded(proxy_port: int, token: str) -> socket.socket:
    sock = _connect(proxy_port)
    sock.sendall(
        f"GET /p/{token}/ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\n"
        "Upgrade: echo\r\n\r\n".encode()
    )
    assert _read_head(sock).startswith(b"HTTP/1.1 101")
    return sock


def _echo_until_closed(sock: socket.socket, give_up: float) -> tuple[float, float]:
    """Pings through the pipe until it closes: (last echo, closed), as time.time()."""
    last_echo = 0.0
    sock.settimeout(0.5)
    while time.time() < give_up:
        try:
            sock.sendall(b"ping")
            data = sock.recv(1024)
        except TimeoutError:
            continue
        except OSError:
            return last_echo, time.time()
        if not data:
            return last_echo, time.time()
        assert data == b"PING"
        last_echo = time.time()
        time.sleep(0.05)
    pytest.fail("the pipe was still open well past its bound")


def _read_until_closed(sock: socket.socket, give_up: float) -> tuple[bytes, float, float]:
    """Everything until the proxy closes: (bytes, last arrival, closed), as time.time()."""
    received, last = b"", 0.0
    sock.settimeout(0.5)
    while time.time() < give_up:
        try:
            data = sock.recv(65536)
        except TimeoutError:
            continue
        except OSError:
            return received, last, time.time()
        if not data:
            return received, last, time.time()
        received, last = received + data, time.time()
    pytest.fail("the response was still streaming well past its bound")


def _refusal(reply: bytes) -> dict[str, Any]:
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 403"), reply
    assert b"Connection: close" in head
    refusal: dict[str, Any] = json.loads(body)
    return refusal


def test_a_websocket_piped_before_expiry_is_closed_at_expiry(
    app: int, proxy: tuple[int, FakeBackend], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=permits.__name__)
    expires = _soon()
    with _upgraded(proxy[0], _token(app, expires)) as sock:
        last_echo, closed = _echo_until_closed(sock, expires + 5)
    # It relayed right up to the expiry, and not a moment past it.
    assert expires - 0.5 < last_echo < expires + 0.2
    assert closed <= expires + SLACK
    assert f"cut an upgraded connection to ns/sb port {app}: the link expired" in caplog.messages


def test_a_websocket_is_closed_when_its_key_leaves_the_ring(
    app: int, proxy: tuple[int, FakeBackend], keys: dict[str, bytes]
) -> None:
    with _upgraded(proxy[0], _token(app, int(time.time()) + 600)) as sock:
        sock.sendall(b"ping")
        assert sock.recv(16) == b"PING"
        threading.Timer(0.5, keys.clear).start()
        removed = time.time() + 0.5
        last_echo, closed = _echo_until_closed(sock, removed + 5)
    # The watch sees the ring at its next tick, so a pipe may relay for up to a tick more.
    assert removed - 0.3 < last_echo < removed + TICK_SECONDS + 0.2
    assert closed <= removed + SLACK


@pytest.mark.parametrize("path", ["/chunked", "/events"])
def test_an_endless_response_is_cut_at_expiry(
    app: int, proxy: tuple[int, FakeBackend], path: str
) -> None:
    expires = _soon()
    with _connect(proxy[0]) as sock:
        sock.sendall(f"GET /p/{_token(app, expires)}{path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        received, last, closed = _read_until_closed(sock, expires + 5)
    assert received.startswith(b"HTTP/1.1 200")
    assert received.count(b"tick") > 5
    assert expires - 0.5 < last < expires + 0.2
    assert closed <= expires + SLACK
    # Cut mid-body, which the client can tell from a body that ended.
    assert not received.endswith(b"0\r\n\r\n")


def test_a_reply_not_started_at_expiry_is_a_403_and_a_pipelined_request_never_runs(
    app: int, proxy: tuple[int, FakeBackend]
) -> None:
    expires = _soon()
    token = _token(app, expires)
    with _connect(proxy[0]) as sock:
        sock.sendall(
            f"GET /p/{token}/slow HTTP/1.1\r\nHost: x\r\n\r\n"
            f"GET /p/{token}/after HTTP/1.1\r\nHost: x\r\n\r\n".encode()
        )
        reply, _, closed = _read_until_closed(sock, expires + SLOW_REPLY_SECONDS + 2)
    assert _refusal(reply) == {"error": "forbidden", "reason": "expired"}
    assert closed <= expires + SLACK
    assert SEEN == ["/slow"]


def test_a_reply_not_started_when_its_key_leaves_the_ring_is_a_403(
    app: int, proxy: tuple[int, FakeBackend], keys: dict[str, bytes]
) -> None:
    with _connect(proxy[0]) as sock:
        token = _token(app, int(time.time()) + 600)
        sock.sendall(f"GET /p/{token}/slow HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        threading.Timer(0.5, keys.clear).start()
        removed = time.time() + 0.5
        reply, _, closed = _read_until_closed(sock, removed + SLOW_REPLY_SECONDS + 2)
    assert _refusal(reply) == {"error": "forbidden", "reason": "unknown-key"}
    assert closed <= removed + SLACK


def test_a_request_body_still_arriving_at_expiry_is_cut_with_a_403(
    app: int, proxy: tuple[int, FakeBackend]
) -> None:
    expires = _soon()
    with _connect(proxy[0]) as sock:
        sock.sendall(
            f"POST /p/{_token(app, expires)}/upload HTTP/1.1\r\nHost: x\r\n"
            "Content-Length: 100000\r\n\r\n".encode()
        )
        sock.settimeout(0.1)
        reply = b""
        while not reply and time.time() < expires + 5:
            try:
                sock.sendall(b"x" * 10)  # a body that would take 100 s at this pace
                reply = sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break
        answered = time.time()
        assert reply, "no reply while the body trickled in past the link's expiry"
        rest, _, _ = _read_until_closed(sock, answered + 5)
    assert answered <= expires + SLACK
    assert _refusal(reply + rest) == {"error": "forbidden", "reason": "expired"}


def test_a_kept_alive_connection_checks_each_request_and_drops_its_tunnel_at_expiry(
    app: int, proxy: tuple[int, FakeBackend]
) -> None:
    expires = _soon()
    old = _token(app, expires)
    conn = http.client.HTTPConnection("127.0.0.1", proxy[0], timeout=5)
    conn.request("GET", f"/p/{old}/a")
    assert conn.getresponse().read().startswith(b"conn=")
    sock = conn.sock
    time.sleep(max(0.0, expires - time.time()) + 0.3)
    # A fresh link on the same connection works, over a new tunnel: the old one ended
    # with the link it was opened for.
    conn.request("GET", f"/p/{_token(app, int(time.time()) + 60)}/b")
    assert conn.getresponse().read().startswith(b"conn=")
    # The first link, sent again on the same connection, is refused.
    conn.request("GET", f"/p/{old}/c")
    response = conn.getresponse()
    assert response.status == 403
    assert json.loads(response.read()) == {"error": "forbidden", "reason": "expired"}
    assert conn.sock is sock or conn.sock is None  # one connection throughout
    conn.close()
    assert SEEN == ["/a", "/b"]
    assert len(proxy[1].opened) == 2


def test_a_cut_tunnel_ends_a_blocked_read_refuses_sends_and_still_closes_once(
    app: int,
) -> None:
    closed: list[bool] = []
    tunnel = Tunnel(LoopbackExec(app), on_close=lambda: closed.append(True))  # type: ignore[arg-type]
    tunnel.send(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
    threading.Timer(0.3, tunnel.abort).start()
    started = time.monotonic()
    assert tunnel.read(1024) == b""  # the slow reply never comes: end of stream, at once
    assert time.monotonic() - started < 2
    assert tunnel.at_eof
    with pytest.raises(ExecStreamError):
        tunnel.send(b"more")
    tunnel.close()
    tunnel.close()
    assert closed == [True]


def test_a_sweep_that_fails_does_not_end_the_watch(caplog: pytest.LogCaptureFixture) -> None:
    failed: list[bool] = []

    def keys() -> dict[str, bytes]:
        if threading.current_thread().name == "permit-watch" and not failed:
            failed.append(True)
            raise OSError("the key ring could not be read")
        return {"k1": KEY}

    watch = PermitWatch(keys)
    ours, theirs = socket.socketpair()
    try:
        with ours, theirs:
            permit = watch.permit(ours)
            expires = _soon()
            permit.admit(_token(8000, expires))
            permit.replying()
            theirs.settimeout(expires + SLACK - time.time())
            assert theirs.recv(1) == b""  # shut by the watch at the expiry
            assert time.time() >= expires
            watch.release(permit)
    finally:
        watch.stop()
    assert "checking the open preview connections failed" in caplog.messages
