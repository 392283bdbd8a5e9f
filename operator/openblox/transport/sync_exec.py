"""One `pods/exec` over a websocket, channel protocol v5, with bytes kept exact.

The blocking one of the two places an exec websocket is opened (the other is its asyncio
twin, `async_exec`, over aiohttp); nothing outside `openblox.transport` opens one. On
wss:// it runs over `tls.DuplexTLSSocket`, so one thread may write stdin while another
reads output (see tls.py for why).
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator, Sequence

import websocket

from openblox.transport.errors import ExecStreamError
from openblox.transport.frames import (
    PROTOCOL,
    ExecOutput,
    Frame,
    close_message,
    decode_frame,
    exec_path,
    refusal_message,
    stdin_messages,
    websocket_url,
)
from openblox.transport.session import Session
from openblox.transport.tls import DuplexTLSSocket


class ExecSocket:
    """One exec session. Iterate `frames` for output; the last is the ERROR channel's Status."""

    def __init__(
        self,
        session: Session,
        namespace: str,
        pod: str,
        container: str,
        argv: Sequence[str],
        *,
        stdin: bool,
        timeout: float,
        stderr: bool = True,
        headers: Sequence[str] = (),
    ) -> None:
        path = exec_path(namespace, pod, container, argv, stdin=stdin, stderr=stderr)
        url = websocket_url(session.server, path)
        header = [f"{name}: {value}" for name, value in session.authorization().items()]
        header += headers
        tls: DuplexTLSSocket | None = None
        try:
            if url.startswith("wss://"):
                tls = DuplexTLSSocket.connect(
                    url, session.ssl_context(), timeout, session.credentials.tls_server_name
                )
            self._socket = websocket.create_connection(
                url,
                header=header,
                subprotocols=[PROTOCOL],
                timeout=timeout,
                enable_multithread=True,
                socket=tls,
            )
        except websocket.WebSocketBadStatusException as error:
            _close_quietly(tls)
            body = getattr(error, "resp_body", b"") or b""
            raise ExecStreamError(
                refusal_message(error.status_code, body), error.status_code
            ) from error
        except (OSError, websocket.WebSocketException) as error:
            _close_quietly(tls)
            raise ExecStreamError(f"could not open exec to {namespace}/{pod}: {error}") from error
        negotiated = self._socket.getsubprotocol()
        if negotiated != PROTOCOL:
            self._socket.close()
            raise ExecStreamError(f"API server does not speak {PROTOCOL} (got {negotiated!r})")

    def send_stdin(self, data: bytes) -> None:
        for message in stdin_messages(data):
            self._socket.send_binary(message)

    def close_stdin(self) -> None:
        self._socket.send_binary(close_message())

    def frames(self, deadline: float) -> Iterator[Frame]:
        """Frames until the server closes the stream; TimeoutError past `deadline`
        (time.monotonic()); ExecStreamError if the stream breaks."""
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("exec stream passed its deadline")
            self._socket.settimeout(remaining)
            try:
                opcode, payload = self._socket.recv_data()
            except websocket.WebSocketConnectionClosedException:
                return
            except websocket.WebSocketTimeoutException as error:
                raise TimeoutError("exec stream passed its deadline") from error
            except (OSError, websocket.WebSocketException) as error:
                raise ExecStreamError(f"exec stream broke: {error}") from error
            if opcode == websocket.ABNF.OPCODE_CLOSE:
                return
            frame = decode_frame(payload)
            if frame is not None:
                yield frame

    def read_to_end(self, deadline: float, output: ExecOutput | None = None) -> ExecOutput:
        """Every frame until the stream ends, fed to `output` (a new one if None); then the
        socket is closed. It raises as `frames` does, and what arrived until then stays in
        the caller's `output`, for one that reports partial output."""
        output = output if output is not None else ExecOutput()
        try:
            for frame in self.frames(deadline):
                output.feed(frame)
        finally:
            self.close()
        return output

    def abort(self) -> None:
        """Shuts the connection both ways at once, from any thread and without a closing
        handshake, so a send or read blocked on it fails now rather than when the peer
        answers. `close` still releases it; call this only before `close` has begun (the
        descriptor could be another connection's by then)."""
        raw = self._socket.sock
        if raw is not None:
            with contextlib.suppress(OSError):
                raw.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        with contextlib.suppress(OSError, websocket.WebSocketException):
            self._socket.close()


def _close_quietly(tls: DuplexTLSSocket | None) -> None:
    if tls is not None:
        with contextlib.suppress(OSError):
            tls.close()
