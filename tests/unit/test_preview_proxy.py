"""The preview proxy's HTTP handling, in-process: the exec stream is replaced by a loopback
socket to a local server, so framing, keep-alive, streaming, upgrades and the
token-first rule are checked without a cluster."""

from __future__ import annotations

import http.client
import socket
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from openblox.preview.tokens import Grant, sign
from tests.unit.preview_fakes import FakeBackend, echo_upgraded, serving_app, serving_proxy

KEY = b"s" * 32


class App(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *_: Any) -> None:
        pass

    def do_GET(self) -> None:
        if self.path == "/upgrade":
            echo_upgraded(self)
            return
        if self.path.startswith("/big"):
            size = int(self.path.split("=")[1])
            self.send_response(200)
            self.send_header("Content-Length", str(size))
            self.end_headers()
            block = b"x" * 65536
            sent = 0
            while sent < size:
                self.wfile.write(block[: size - sent])
                sent += min(65536, size - sent)
            return
        body = f"path={self.path} host={self.headers['Host']} conn={id(self.connection)}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        if self.headers.get("Transfer-Encoding") == "chunked":
            data = b""
            while True:
                size = int(self.rfile.readline().strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    break
                data += self.rfile.read(size)
                self.rfile.readline()
        else:
            data = self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for part in (data[:3], data[3:]):
            if part:
                self.wfile.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
        self.wfile.write(b"0\r\n\r\n")


@pytest.fixture
def app() -> Iterator[int]:
    with serving_app(App) as port:
        yield port


@pytest.fixture
def proxy() -> Iterator[tuple[int, FakeBackend]]:
    with serving_proxy(lambda: {"k1": KEY}) as served:
        yield served


def _token(port: int, ttl: int = 60, key: bytes = KEY, key_id: str = "k1") -> str:
    return sign(Grant("ns", "sb", "uid", port, int(time.time()) + ttl), key_id, key)


def test_keep_alive_reuses_one_tunnel(app: int, proxy: tuple[int, FakeBackend]) -> None:
    port, backend = proxy
    token = _token(app)
    conn = http.client.HTTPConnection("127.0.0.1", port)
    bodies = []
    for path in ("/a?x=1", "/b"):
        conn.request("GET", f"/p/{token}{path}")
        response = conn.getresponse()
        assert response.status == 200
        assert response.getheader("Referrer-Policy") == "no-referrer"
        bodies.append(response.read().decode())
    assert bodies[0].startswith(f"path=/a?x=1 host=localhost:{app}")
    assert bodies[0].split("conn=")[1] == bodies[1].split("conn=")[1]
    assert len(backend.opened) == 1


def test_bodies_stream_both_ways(app: int, proxy: tuple[int, FakeBackend]) -> None:
    port, _ = proxy
    token = _token(app)
    conn = http.client.HTTPConnection("127.0.0.1", port)
    conn.request("POST", f"/p/{token}/echo", body=b"hello world")
    assert conn.getresponse().read() == b"hello world"
    conn.request("POST", f"/p/{token}/echo", body=iter([b"chunk", b"ed"]))
    assert conn.getresponse().read() == b"chunked"
    conn.request("GET", f"/p/{token}/big?n={5 << 20}")
    assert len(conn.getresponse().read()) == 5 << 20


@pytest.mark.parametrize(
    "token",
    [
        "garbage",
        "v1.k1.e30.AAAA",
        "expired",
        "unknown",
        "forged",
    ],
)
def test_bad_tokens_get_403_and_no_backend_call(
    app: int, proxy: tuple[int, FakeBackend], token: str
) -> None:
    port, backend = proxy
    token = {
        "expired": _token(app, ttl=-5),
        "unknown": _token(app, key_id="k2"),
        "forged": _token(app, key=b"f" * 32),
    }.get(token, token)
    conn = http.client.HTTPConnection("127.0.0.1", port)
    conn.request("GET", f"/p/{token}/")
    response = conn.getresponse()
    assert response.status == 403
    assert b"forbidden" in response.read()
    assert backend.opened == []


def test_no_token_redirect_and_health(app: int, proxy: tuple[int, FakeBackend]) -> None:
    port, _ = proxy
    conn = http.client.HTTPConnection("127.0.0.1", port)
    conn.request("GET", "/healthz")
    assert conn.getresponse().status == 200
    conn = http.client.HTTPConnection("127.0.0.1", port)
    conn.request("GET", "/etc/passwd")
    assert conn.getresponse().status == 404
    token = _token(app)
    conn = http.client.HTTPConnection("127.0.0.1", port)
    conn.request("GET", f"/p/{token}")
    response = conn.getresponse()
    assert response.status == 308
    assert response.getheader("Location") == f"/p/{token}/"


def test_nothing_listening_is_502(proxy: tuple[int, FakeBackend]) -> None:
    port, _ = proxy
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", f"/p/{_token(free)}/")
    response = conn.getresponse()
    assert response.status == 502
    assert response.getheader("Connection") == "close"


def test_expect_continue_is_answered_by_the_proxy(app: int, proxy: tuple[int, FakeBackend]) -> None:
    port, _ = proxy
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(
            f"POST /p/{_token(app)}/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
            "Expect: 100-continue\r\n\r\n".encode()
        )
        assert sock.recv(1024).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        sock.sendall(b"hello")
        reply = b""
        while not reply.endswith(b"0\r\n\r\n"):
            reply += sock.recv(65536)
        assert reply.startswith(b"HTTP/1.1 200") and b"hel\r\n" in reply


@pytest.mark.parametrize(
    "head",
    [
        "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
        "Content-Length: 5\r\nContent-Length: 6\r\n",
        "Transfer-Encoding: gzip\r\n",
        "X-Bad: a\rb\r\n",
        " Folded: header\r\n",
    ],
)
def test_ambiguous_framing_is_refused(app: int, proxy: tuple[int, FakeBackend], head: str) -> None:
    port, backend = proxy
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(f"POST /p/{_token(app)}/echo HTTP/1.1\r\nHost: x\r\n{head}\r\n".encode())
        assert sock.recv(1024).startswith(b"HTTP/1.1 400")
    assert backend.opened == []


def test_an_upgrade_becomes_a_two_way_pipe(app: int, proxy: tuple[int, FakeBackend]) -> None:
    port, _ = proxy
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(
            f"GET /p/{_token(app)}/upgrade HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\n"
            "Upgrade: echo\r\n\r\n".encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            head += sock.recv(4096)
        assert head.startswith(b"HTTP/1.1 101")
        assert b"Upgrade: echo" in head
        for word in (b"hello", b"again"):
            sock.sendall(word)
            assert sock.recv(1024) == word.upper()
