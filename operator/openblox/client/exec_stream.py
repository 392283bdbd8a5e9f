"""pods/exec over the websocket channel protocol v5, with bytes kept exact.

v5 adds a close signal for stdin, so a command reading its input sees end-of-file
while its output is still flowing. Channels: 0 stdin, 1 stdout, 2 stderr, 3 the
exec's final Status, 255 close (the next byte names the channel being closed).
"""

from __future__ import annotations

import contextlib
import json
import ssl
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import websocket

from openblox.client.duplex_tls import DuplexTLSSocket
from openblox.client.errors import ExecTransportError

PROTOCOL = "v5.channel.k8s.io"
STDIN, STDOUT, STDERR, ERROR, CLOSE = 0, 1, 2, 3, 255


@dataclass(frozen=True)
class Connection:
    """Where the API server is and how to authenticate, from a kubernetes Configuration."""

    host: str
    headers: tuple[str, ...]
    sslopt: dict[str, Any]

    @classmethod
    def from_configuration(cls, configuration: Any) -> Connection:
        if configuration.refresh_api_key_hook is not None:
            configuration.refresh_api_key_hook(configuration)
        headers = []
        token = configuration.get_api_key_with_prefix("BearerToken", alias="authorization")
        if token:
            headers.append(f"Authorization: {token}")
        sslopt: dict[str, Any] = {
            "cert_reqs": ssl.CERT_REQUIRED if configuration.verify_ssl else ssl.CERT_NONE
        }
        if configuration.ssl_ca_cert:
            sslopt["ca_certs"] = configuration.ssl_ca_cert
        if configuration.cert_file:
            sslopt["certfile"] = configuration.cert_file
            sslopt["keyfile"] = configuration.key_file
        if configuration.tls_server_name:
            sslopt["server_hostname"] = configuration.tls_server_name
        return cls(configuration.host, tuple(headers), sslopt)


@dataclass(frozen=True)
class Frame:
    channel: int
    data: bytes


class ExecSocket:
    """One exec session. Iterate for output frames; the last is the ERROR channel's Status."""

    def __init__(
        self,
        connection: Connection,
        namespace: str,
        pod: str,
        container: str,
        argv: Sequence[str],
        *,
        stdin: bool,
        timeout: float,
    ) -> None:
        query = [("command", arg) for arg in argv]
        query += [
            ("container", container),
            ("stdout", "true"),
            ("stderr", "true"),
            ("stdin", "true" if stdin else "false"),
        ]
        url = (
            connection.host.replace("https://", "wss://", 1).replace("http://", "ws://", 1)
            + f"/api/v1/namespaces/{namespace}/pods/{pod}/exec?{urlencode(query)}"
        )
        tls: DuplexTLSSocket | None = None
        try:
            # wss: our own TLS layer, which one thread may write while another reads.
            if url.startswith("wss://"):
                tls = DuplexTLSSocket.connect(url, connection.sslopt, timeout)
            self._socket = websocket.create_connection(
                url,
                header=list(connection.headers),
                subprotocols=[PROTOCOL],
                timeout=timeout,
                enable_multithread=True,
                socket=tls,
            )
        except websocket.WebSocketBadStatusException as error:
            _close_quietly(tls)
            raise ExecTransportError(_describe_refusal(error), error.status_code) from error
        except (OSError, websocket.WebSocketException) as error:
            _close_quietly(tls)
            raise ExecTransportError(
                f"could not open exec to {namespace}/{pod}: {error}"
            ) from error
        negotiated = self._socket.getsubprotocol()
        if negotiated != PROTOCOL:
            self._socket.close()
            raise ExecTransportError(f"API server does not speak {PROTOCOL} (got {negotiated!r})")

    def send_stdin(self, data: bytes) -> None:
        for start in range(0, len(data), 1 << 20):
            self._socket.send_binary(bytes([STDIN]) + data[start : start + (1 << 20)])

    def close_stdin(self) -> None:
        self._socket.send_binary(bytes([CLOSE, STDIN]))

    def frames(self, deadline: float) -> Iterator[Frame]:
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
                raise ExecTransportError(f"exec stream broke: {error}") from error
            if opcode == websocket.ABNF.OPCODE_CLOSE:
                return
            if payload:
                yield Frame(payload[0], bytes(payload[1:]))

    def close(self) -> None:
        with contextlib.suppress(OSError, websocket.WebSocketException):
            self._socket.close()


def exit_code_from_status(data: bytes) -> int | None:
    """The exit code in the exec's final Status; None when it is not an exit status."""
    status = json.loads(data or b"{}")
    if status.get("status") == "Success":
        return 0
    for cause in (status.get("details") or {}).get("causes") or []:
        if cause.get("reason") == "ExitCode":
            return int(cause["message"])
    return None


def _describe_refusal(error: websocket.WebSocketBadStatusException) -> str:
    body = getattr(error, "resp_body", b"") or b""
    try:
        message = json.loads(body).get("message") or ""
    except ValueError:
        message = body.decode("utf-8", "replace")
    return f"exec refused ({error.status_code}): {message}".rstrip(": ")


def _close_quietly(tls: DuplexTLSSocket | None) -> None:
    if tls is not None:
        with contextlib.suppress(OSError):
            tls.close()
