"""The preview proxy in-process, for unit tests: the exec stream that carries the relay is
replaced by a loopback TCP connection to a local server, so the proxy's HTTP handling runs
for real without a cluster."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from openblox.preview.relay import Tunnel
from openblox.preview.server import PreviewServer
from openblox.preview.tokens import Grant
from openblox.transport import STDOUT, Frame


class LoopbackExec:
    """Stands in for ExecSocket: stdin/stdout of the relay become a TCP connection."""

    def __init__(self, port: int) -> None:
        self._sock = socket.create_connection(("127.0.0.1", port))

    def send_stdin(self, data: bytes) -> None:
        self._sock.sendall(data)

    def close_stdin(self) -> None:
        self._sock.shutdown(socket.SHUT_WR)

    def frames(self, deadline: float) -> Iterator[Frame]:
        while True:
            try:
                data = self._sock.recv(65536)
            except OSError:
                return
            if not data:
                return
            yield Frame(STDOUT, data)

    def abort(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._sock.close()


class FakeBackend:
    def __init__(self) -> None:
        self.opened: list[Grant] = []

    def open(self, grant: Grant) -> Tunnel:
        self.opened.append(grant)
        return Tunnel(LoopbackExec(grant.port))  # type: ignore[arg-type]


def echo_upgraded(handler: BaseHTTPRequestHandler) -> None:
    """An app's answer to an upgrade: 101, then what comes back upper-cased until the
    client closes."""
    handler.send_response(101)
    handler.send_header("Upgrade", "echo")
    handler.send_header("Connection", "Upgrade")
    handler.end_headers()
    handler.wfile.flush()
    while data := handler.connection.recv(65536):
        handler.connection.sendall(data.upper())
    handler.close_connection = True


@contextlib.contextmanager
def serving_app(handler: type[BaseHTTPRequestHandler]) -> Iterator[int]:
    """A local HTTP server standing in for the app in the sandbox; yields its port."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def serving_proxy(keys: Callable[[], Mapping[str, bytes]]) -> Iterator[tuple[int, FakeBackend]]:
    """The proxy over a FakeBackend; yields its port and the backend."""
    backend = FakeBackend()
    server = PreviewServer(("127.0.0.1", 0), keys, backend)
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    try:
        yield server.server_address[1], backend
    finally:
        server.shutdown()
        server.server_close()
        server.watch.stop()
