"""The exec streams' TLS layer against a TLS server on loopback: bytes stay exact and in
order while one thread writes and another reads, the name and chain are checked, and
the ends of a connection read as they do on an SSLSocket."""

from __future__ import annotations

import hashlib
import os
import re
import socket
import ssl
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from openblox.transport.credentials import Credentials
from openblox.transport.session import client_context
from openblox.transport.tls import DuplexTLSSocket

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "cluster"))
import pki

pytestmark = pytest.mark.timeout(60)


def _server_certificate(directory: Path) -> tuple[Path, Path, Path]:
    """(CA, server certificate, key) for 127.0.0.1, made as the embedded cluster's are."""
    ca, ca_key = pki.ensure_ca(directory)
    pki.ensure_leaf(
        directory,
        pki.Leaf("server", "loopback", None, (pki.SERVER,), (), ("127.0.0.1",)),
        ca,
        ca_key,
    )
    return directory / "ca.crt", directory / "server.crt", directory / "server.key"


class _Server:
    """A TLS server on 127.0.0.1 that runs `handle` on each accepted connection."""

    def __init__(self, directory: Path, handle: Callable[[ssl.SSLSocket], None]) -> None:
        self.ca, cert, key = _server_certificate(directory)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._context, self._handle = context, handle
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        try:
            with self._context.wrap_socket(conn, server_side=True) as tls:
                self._handle(tls)
        except OSError:
            pass  # the client gave up on this connection (a test of refusal)

    def url(self) -> str:
        return f"wss://127.0.0.1:{self.port}/"

    def close(self) -> None:
        self._listener.close()


def _echo(tls: ssl.SSLSocket) -> None:
    # One thread: an SSLSocket server is used the way it is safe to use.
    while data := tls.recv(65536):
        tls.sendall(data)


@pytest.fixture
def echo_server(tmp_path: Path) -> Iterator[_Server]:
    server = _Server(tmp_path, _echo)
    yield server
    server.close()


def test_bytes_written_by_one_thread_come_back_exact_to_another(echo_server: _Server) -> None:
    tls = DuplexTLSSocket.connect(echo_server.url(), _trusting(echo_server.ca), 10)
    tls.settimeout(30)
    payload = os.urandom(24 << 20)
    sent = hashlib.sha256(payload).hexdigest()

    def write() -> None:
        for start in range(0, len(payload), 7001):  # not aligned to records or reads
            tls.send(payload[start : start + 7001])

    writer = threading.Thread(target=write)
    writer.start()
    received = hashlib.sha256()
    remaining = len(payload)
    while remaining:
        chunk = tls.recv(65536)
        assert chunk, "the connection ended early"
        received.update(chunk)
        remaining -= len(chunk)
    writer.join()
    tls.close()
    assert received.hexdigest() == sent


def test_a_server_that_does_not_read_cannot_stall_the_reader(tmp_path: Path) -> None:
    # The server sends 8 MiB without reading; the client writes 8 MiB at the same time.
    # With one lock held across socket I/O both sides would block on full buffers.
    size = 8 << 20

    def flood_then_drain(tls: ssl.SSLSocket) -> None:
        tls.sendall(b"s" * size)
        got = 0
        while got < size and (data := tls.recv(65536)):
            got += len(data)
        tls.sendall(f"{got}".encode())

    server = _Server(tmp_path, flood_then_drain)
    tls = DuplexTLSSocket.connect(server.url(), _trusting(server.ca), 10)
    tls.settimeout(30)
    writer = threading.Thread(target=lambda: tls.send(b"c" * size))
    writer.start()
    got = 0
    while got < size:
        got += len(tls.recv(65536))
    writer.join(timeout=30)
    assert not writer.is_alive()
    assert tls.recv(64) == str(size).encode()
    tls.close()
    server.close()


def test_the_end_of_the_connection_reads_as_empty(tmp_path: Path) -> None:
    def say_and_close(tls: ssl.SSLSocket) -> None:
        tls.sendall(b"bye")

    server = _Server(tmp_path, say_and_close)
    tls = DuplexTLSSocket.connect(server.url(), _trusting(server.ca), 10)
    tls.settimeout(10)
    assert tls.recv(10) == b"bye"
    assert tls.recv(10) == b""
    tls.close()
    server.close()


def test_a_read_waits_no_longer_than_the_timeout(tmp_path: Path) -> None:
    quiet = threading.Event()

    def say_nothing(tls: ssl.SSLSocket) -> None:
        quiet.wait(10)

    server = _Server(tmp_path, say_nothing)
    tls = DuplexTLSSocket.connect(server.url(), _trusting(server.ca), 10)
    tls.settimeout(0.2)
    with pytest.raises(TimeoutError):
        tls.recv(10)
    quiet.set()
    tls.close()
    server.close()


def test_an_unknown_issuer_is_refused(echo_server: _Server, tmp_path: Path) -> None:
    (tmp_path / "other").mkdir()
    pki.ensure_ca(tmp_path / "other")  # a CA that did not sign the server
    with pytest.raises(ssl.SSLCertVerificationError):
        DuplexTLSSocket.connect(echo_server.url(), _trusting(tmp_path / "other" / "ca.crt"), 10)


def test_a_wrong_server_name_is_refused(echo_server: _Server) -> None:
    with pytest.raises(ssl.SSLCertVerificationError, match=re.escape("api.example.invalid")):
        DuplexTLSSocket.connect(
            echo_server.url(), _trusting(echo_server.ca), 10, "api.example.invalid"
        )


def test_verification_is_off_only_when_asked(echo_server: _Server) -> None:
    checked = client_context(Credentials(server="https://127.0.0.1"))
    assert checked.verify_mode == ssl.CERT_REQUIRED
    assert checked.check_hostname
    off = client_context(Credentials(server="https://127.0.0.1", insecure=True))
    assert off.verify_mode == ssl.CERT_NONE and not off.check_hostname
    tls = DuplexTLSSocket.connect(echo_server.url(), off, 10)
    tls.settimeout(10)
    tls.send(b"ping")
    assert tls.recv(10) == b"ping"
    tls.close()


def _trusting(ca: Path) -> ssl.SSLContext:
    return client_context(Credentials(server="https://127.0.0.1", ca_file=str(ca)))
