"""The preview proxy: `/p/<token>/<path>` -> 127.0.0.1:<port> in the token's sandbox.

Each request's token is checked first, from the path alone, with no I/O but reading the
mounted key ring: a forged, tampered, expired or unknown-key token gets 403 and the
connection is closed before its body is read and before any call to the API server.
A good token is relayed over a `Tunnel` (one pods/exec stream). A client connection keeps
its tunnel between requests to the same sandbox and port (keep-alive end to end); bodies
stream in both directions with their own framing (Content-Length, chunked, or until
close); a `101 Switching Protocols` reply (websockets) turns the connection into a
two-way byte pipe.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import socket
import socketserver
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, cast

from prometheus_client import Counter, Gauge

from openblox.names import CONTAINER_NAME, GROUP, PLURAL, VERSION
from openblox.preview.relay import Tunnel, agent_argv
from openblox.preview.tokens import Grant, TokenError, verify
from openblox.transport import Api, ApiError, ExecSocket, ExecStreamError, Session, path

log = logging.getLogger(__name__)

PREFIX = "/p/"
MAX_HEAD_BYTES = 64 * 1024
MAX_HEADERS = 128
CLIENT_IDLE_SECONDS = 120.0
MAX_CONNECTIONS = 512
POD_CACHE_SECONDS = 10.0
# Hop-by-hop: about one connection, never forwarded (RFC 9110 7.6.1).
HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-connection", "te", "upgrade", "proxy-authorization"}
)

API_REQUESTS = Counter(
    "openblox_preview_api_requests",
    "Requests the proxy made to the Kubernetes API server, by kind",
    ["kind"],
)
DENIED = Counter(
    "openblox_preview_denied", "Requests refused because of their token, by reason", ["reason"]
)
RELAYED = Counter("openblox_preview_relayed", "Requests relayed to a sandbox")
TUNNELS_OPENED = Counter("openblox_preview_tunnels_opened", "pods/exec tunnels opened")
TUNNELS_OPEN = Gauge("openblox_preview_tunnels_open", "pods/exec tunnels open now")


class HTTPError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Backend(Protocol):
    def open(self, grant: Grant) -> Tunnel: ...


@dataclass
class Head:
    start: str
    headers: list[tuple[str, str]]

    def get(self, name: str) -> str | None:
        values = [v for k, v in self.headers if k.lower() == name]
        return ", ".join(values) if values else None

    def tokens(self, name: str) -> set[str]:
        return {t.strip().lower() for t in (self.get(name) or "").split(",") if t.strip()}


@dataclass(frozen=True)
class Request:
    head: Head
    method: str
    path: str
    version: str
    grant: Grant
    token: str


class KubeBackend:
    """Finds the sandbox's pod through the API server and opens the relay exec in it.

    Every call to the API server goes through `_count` (the metric proves that a refused
    token caused none).
    """

    def __init__(self, session: Session) -> None:
        self._session = session
        self._api = Api(session, user_agent="openblox-preview")
        self._pods: dict[tuple[str, str, str], tuple[str, float]] = {}
        self._lock = threading.Lock()

    def _pod(self, grant: Grant) -> str:
        """The pod of the Sandbox the grant names, checked against the grant's uid.

        The Sandbox is read on every new tunnel: a namesake made after the link was
        signed has another uid, and the link must not reach it, not even for a moment.
        Only the pod's ownership check is remembered for a while, per pod name.
        """
        try:
            API_REQUESTS.labels("get-sandbox").inc()
            body = self._api.get(
                path(
                    group=GROUP,
                    version=VERSION,
                    plural=PLURAL,
                    namespace=grant.namespace,
                    name=grant.sandbox,
                )
            )
        except ApiError as error:
            raise self._lookup_error(grant, error) from error
        if body["metadata"].get("uid") != grant.uid:
            raise HTTPError(404, "the sandbox this link was made for is gone")
        pod_name = str((body.get("status") or {}).get("podName") or "")
        if not pod_name:
            raise HTTPError(503, "the sandbox has no pod yet")
        key = (grant.namespace, grant.sandbox, grant.uid)
        with self._lock:
            cached = self._pods.get(key)
        if cached and cached[0] == pod_name and time.monotonic() - cached[1] < POD_CACHE_SECONDS:
            return pod_name
        try:
            API_REQUESTS.labels("get-pod").inc()
            pod = self._api.get(path(plural="pods", namespace=grant.namespace, name=pod_name))
        except ApiError as error:
            raise self._lookup_error(grant, error) from error
        # Only the operator may make pods with this label (admission), and it owns them.
        metadata = pod.get("metadata") or {}
        labels = metadata.get("labels") or {}
        owners = {ref.get("uid") for ref in metadata.get("ownerReferences") or []}
        if labels.get("openblox.sh/sandbox") != grant.sandbox or grant.uid not in owners:
            raise HTTPError(404, "the sandbox's pod is not one the operator made")
        with self._lock:
            self._pods[key] = (pod_name, time.monotonic())
        return pod_name

    @staticmethod
    def _lookup_error(grant: Grant, error: ApiError) -> HTTPError:
        if error.status == 404:
            return HTTPError(404, "the sandbox this link was made for is gone")
        log.warning("looking up %s/%s: %s", grant.namespace, grant.sandbox, error.reason)
        return HTTPError(502, f"the API server said {error.status}")

    def open(self, grant: Grant) -> Tunnel:
        pod = self._pod(grant)
        try:
            API_REQUESTS.labels("exec").inc()
            socket_ = ExecSocket(
                self._session,
                grant.namespace,
                pod,
                CONTAINER_NAME,
                agent_argv(grant.port),
                stdin=True,
                timeout=30,
            )
        except ExecStreamError as error:
            with self._lock:
                self._pods.pop((grant.namespace, grant.sandbox, grant.uid), None)
            log.warning("exec into %s/%s failed: %s", grant.namespace, pod, error)
            raise HTTPError(502, "could not reach the sandbox") from error
        TUNNELS_OPENED.inc()
        TUNNELS_OPEN.inc()
        return Tunnel(socket_, on_close=TUNNELS_OPEN.dec)


def read_head(stream: io.BufferedReader, bad: int = 400) -> Head | None:
    """A request or response head; None at a clean end of stream before it.

    `bad` is the status to answer a malformed one with: 400 for a client's request,
    502 for a sandbox's reply.
    """
    lines: list[bytes] = []
    total = 0
    while True:
        line = stream.readline(MAX_HEAD_BYTES + 1)
        if not line:
            if not lines:
                return None
            raise HTTPError(bad, "the head ended early")
        total += len(line)
        if total > MAX_HEAD_BYTES or len(lines) > MAX_HEADERS:
            raise HTTPError(431 if bad == 400 else bad, "the head is too large")
        if line in (b"\r\n", b"\n"):
            if not lines:
                continue  # a stray blank line between messages (RFC 9112 2.2)
            break
        lines.append(line)
    start = lines[0].decode("latin-1").rstrip("\r\n")
    headers = []
    for raw in lines[1:]:
        line = raw.rstrip(b"\r\n")
        name, colon, value = line.decode("latin-1").partition(":")
        # A bare CR or NUL could split a header differently further on (smuggling).
        if not colon or not name or name != name.strip() or b"\r" in line or b"\0" in line:
            raise HTTPError(bad, "a header line is malformed")
        headers.append((name, value.strip()))
    return Head(start, headers)


def body_framing(head: Head) -> tuple[str, int]:
    """("chunked", 0), ("length", n), or ("none", 0); refuses what could smuggle."""
    encodings = head.tokens("transfer-encoding")
    lengths = {v.strip() for k, v in head.headers if k.lower() == "content-length"}
    if encodings:
        if encodings != {"chunked"} or lengths:
            raise HTTPError(400, "unsupported or ambiguous message framing")
        return "chunked", 0
    if lengths:
        if len(lengths) != 1 or not next(iter(lengths)).isdigit():
            raise HTTPError(400, "bad Content-Length")
        return "length", int(next(iter(lengths)))
    return "none", 0


def copy_length(source: io.BufferedReader, write: Callable[[bytes], None], length: int) -> None:
    while length > 0:
        data = source.read1(min(length, 256 * 1024))
        if not data:
            raise ConnectionError("the body ended early")
        write(data)
        length -= len(data)


def copy_chunked(source: io.BufferedReader, write: Callable[[bytes], None]) -> None:
    """Forwards chunked framing as it is, reading it to know where the message ends."""
    while True:
        line = source.readline(1024)
        if not line.endswith(b"\n"):
            raise ConnectionError("bad chunk size line")
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError as error:
            raise ConnectionError("bad chunk size") from error
        write(line)
        if size == 0:
            while True:  # trailers, then the blank line
                trailer = source.readline(MAX_HEAD_BYTES)
                if not trailer:
                    raise ConnectionError("the trailers ended early")
                write(trailer)
                if trailer in (b"\r\n", b"\n"):
                    return
        copy_length(source, write, size + 2)


def copy_until_eof(source: io.BufferedReader, write: Callable[[bytes], None]) -> None:
    while data := source.read1(256 * 1024):
        write(data)


def _json(status: int, reason: str, body: Mapping[str, Any], close: bool) -> bytes:
    payload = json.dumps(body).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\nCache-Control: no-store\r\n"
        + ("Connection: close\r\n" if close else "")
        + "\r\n"
    )
    return head.encode("latin-1") + payload


REASONS = {
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    431: "Request Header Fields Too Large",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}


class Conversation:
    """One client connection: a series of requests, each checked, then relayed."""

    def __init__(
        self, sock: socket.socket, keys: Callable[[], Mapping[str, bytes]], backend: Backend
    ) -> None:
        self._sock = sock
        self._keys = keys
        self._backend = backend
        self._rfile = cast(io.BufferedReader, sock.makefile("rb", buffering=64 * 1024))
        self._tunnel: Tunnel | None = None
        self._tunnel_key: tuple[str, str, str, int] | None = None
        self._upstream: io.BufferedReader | None = None
        self._peer = str(sock.getpeername()[0]) if sock.family != socket.AF_UNIX else ""

    def send(self, data: bytes) -> None:
        self._sock.sendall(data)

    def run(self) -> None:
        self._sock.settimeout(CLIENT_IDLE_SECONDS)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while self._one():
                pass
        except HTTPError as error:
            with contextlib.suppress(OSError):
                self.send(
                    _json(
                        error.status,
                        REASONS.get(error.status, "Error"),
                        {"error": str(error)},
                        True,
                    )
                )
        except (OSError, ValueError, ExecStreamError):
            pass  # either side went away mid-message: nothing more can be said on it
        finally:
            self._drop_tunnel()
            with contextlib.suppress(OSError):
                self._rfile.close()

    def _drop_tunnel(self) -> None:
        if self._tunnel is not None:
            self._tunnel.close()
        self._tunnel = self._upstream = self._tunnel_key = None

    def _one(self) -> bool:
        """Serves one request; False when the connection should end."""
        head = read_head(self._rfile)
        if head is None:
            return False
        parts = head.start.split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            raise HTTPError(400, "not an HTTP/1.x request line")
        method, target, version = parts
        if target in ("/healthz", "/readyz"):
            self.send(_json(200, "OK", {"ok": True}, True))
            return False
        if not target.startswith(PREFIX):
            raise HTTPError(404, "previews live under /p/<token>/")
        token, rest = target[len(PREFIX) :], ""
        for index, char in enumerate(token):
            if char in "/?":
                token, rest = token[:index], token[index:]
                break
        # The token is checked before anything else happens for this request.
        try:
            grant = verify(token, self._keys(), time.time())
        except TokenError as error:
            DENIED.labels(error.reason).inc()
            self.send(_json(403, "Forbidden", {"error": "forbidden", "reason": error.reason}, True))
            return False
        if not rest.startswith("/"):
            # /p/<token> or /p/<token>?q: send the browser under the prefix, so that
            # relative links resolve inside the preview.
            location = f"{PREFIX}{token}/{rest}"
            self.send(
                f"HTTP/1.1 308 Permanent Redirect\r\nLocation: {location}\r\n"
                "Content-Length: 0\r\n\r\n".encode("latin-1")
            )
            return True
        return self._relay(Request(head, method, rest, version, grant, token))

    def _upstream_head(self, request: Request, upgrade: bool) -> bytes:
        head, grant, token = request.head, request.grant, request.token
        lines = [f"{request.method} {request.path} HTTP/1.1"]
        for name, value in head.headers:
            lower = name.lower()
            if lower in HOP_BY_HOP or lower in ("host", "expect"):
                continue
            if lower.startswith("x-forwarded-"):
                continue
            lines.append(f"{name}: {value}")
        lines.append(f"Host: localhost:{grant.port}")
        lines.append(f"X-Forwarded-Prefix: {PREFIX}{token}")
        if head.get("host"):
            lines.append(f"X-Forwarded-Host: {head.get('host')}")
        if self._peer:
            lines.append(f"X-Forwarded-For: {self._peer}")
        if upgrade:
            lines.append(f"Upgrade: {head.get('upgrade')}")
            lines.append("Connection: Upgrade")
        else:
            lines.append("Connection: keep-alive")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def _tunnel_for(self, grant: Grant) -> tuple[Tunnel, io.BufferedReader, bool]:
        key = (grant.namespace, grant.sandbox, grant.uid, grant.port)
        if self._tunnel is not None and (self._tunnel_key != key or self._tunnel.at_eof):
            self._drop_tunnel()
        if self._tunnel is not None and self._upstream is not None:
            return self._tunnel, self._upstream, True
        try:
            tunnel = self._backend.open(grant)
        except HTTPError:
            raise
        except Exception as error:
            log.warning(
                "opening a tunnel to %s/%s failed: %r", grant.namespace, grant.sandbox, error
            )
            raise HTTPError(502, "could not reach the sandbox") from error
        self._tunnel, self._tunnel_key = tunnel, key
        self._upstream = io.BufferedReader(tunnel, 256 * 1024)
        return tunnel, self._upstream, False

    def _relay(self, request: Request) -> bool:
        RELAYED.inc()
        head, method, grant = request.head, request.method, request.grant
        framing, length = body_framing(head)
        upgrade = "upgrade" in head.tokens("connection") and head.get("upgrade") is not None
        client_keeps = request.version == "HTTP/1.1" and "close" not in head.tokens("connection")
        request_head = self._upstream_head(request, upgrade)
        # The proxy says 100 Continue itself, so it never waits on a body the client holds
        # back until the sandbox's server answers.
        continue_first = framing != "none" and head.get("expect") is not None
        for attempt in (1, 2):
            tunnel, upstream, reused = self._tunnel_for(grant)
            try:
                tunnel.send(request_head)
                if continue_first and attempt == 1:
                    self.send(b"HTTP/1.1 100 Continue\r\n\r\n")
                if framing == "length":
                    copy_length(self._rfile, tunnel.send, length)
                elif framing == "chunked":
                    copy_chunked(self._rfile, tunnel.send)
                reply = read_head(upstream, 502)
            except (ExecStreamError, OSError, ConnectionError) as error:
                reply, failure = None, str(error)
            else:
                failure = ""
            if reply is not None:
                break
            self._drop_tunnel()
            # A kept-alive tunnel the server had already closed: retry a bodiless
            # request once on a fresh one.
            if reused and framing == "none" and attempt == 1:
                continue
            detail = tunnel.diagnostics() or failure or "no reply"
            raise HTTPError(502, f"nothing answered on port {grant.port} in the sandbox: {detail}")
        assert reply is not None
        while True:
            status = _status_of(reply)
            if 100 <= status < 200 and status != 101:
                self.send(_response_head(reply, status, []))
                next_reply = read_head(upstream, 502)
                if next_reply is None:
                    raise HTTPError(502, "the sandbox's server closed after an interim reply")
                reply = next_reply
                continue
            break
        if status == 101 and upgrade:
            self.send(_response_head(reply, status, [], keep_upgrade=True))
            self._pipe(tunnel, upstream)
            return False
        upstream_keeps = reply.start.startswith("HTTP/1.1") and "close" not in reply.tokens(
            "connection"
        )
        if method == "HEAD" or status in (204, 304):
            kind, size = "none", 0
        else:
            kind, size = body_framing(reply)
            if kind == "none":
                kind = "eof"
        keep = client_keeps and kind != "eof"
        extra = [] if keep else [("Connection", "close")]
        if not any(k.lower() == "referrer-policy" for k, _ in reply.headers):
            extra.append(("Referrer-Policy", "no-referrer"))  # the path holds a credential
        self.send(_response_head(reply, status, extra))
        if kind == "length":
            copy_length(upstream, self.send, size)
        elif kind == "chunked":
            copy_chunked(upstream, self.send)
        elif kind == "eof":
            copy_until_eof(upstream, self.send)
        if not upstream_keeps or kind == "eof":
            self._drop_tunnel()
        return keep

    def _pipe(self, tunnel: Tunnel, upstream: io.BufferedReader) -> None:
        """Both ways until either side ends (websockets and other upgrades)."""
        self._sock.settimeout(None)
        tunnel.read_timeout = 24 * 3600.0

        def inbound() -> None:
            try:
                while data := self._rfile.read1(256 * 1024):
                    tunnel.send(data)
            except Exception:  # either side gone: the pipe is over
                pass
            finally:
                tunnel.close()

        thread = threading.Thread(target=inbound, daemon=True, name="pipe-inbound")
        thread.start()
        try:
            copy_until_eof(upstream, self.send)
        except (OSError, ValueError, TimeoutError):
            pass
        finally:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)
            self._drop_tunnel()
            thread.join(5)


def _status_of(reply: Head) -> int:
    parts = reply.start.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise HTTPError(502, "the sandbox's server did not answer HTTP/1.x")
    return int(parts[1])


def _response_head(
    reply: Head, status: int, extra: list[tuple[str, str]], keep_upgrade: bool = False
) -> bytes:
    parts = reply.start.split(" ", 2)
    reason = parts[2] if len(parts) > 2 else ""
    lines = [f"HTTP/1.1 {status} {reason}".rstrip()]
    for name, value in reply.headers:
        lower = name.lower()
        if lower in HOP_BY_HOP and not (keep_upgrade and lower in ("upgrade", "connection")):
            continue
        lines.append(f"{name}: {value}")
    lines += [f"{name}: {value}" for name, value in extra]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class PreviewServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        keys: Callable[[], Mapping[str, bytes]],
        backend: Backend,
    ) -> None:
        self.keys = keys
        self.backend = backend
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._active = 0
        self._active_lock = threading.Condition()
        super().__init__(address, _Handler)

    def drain(self, timeout: float) -> None:
        """After shutdown(): wait up to `timeout` for the open connections to finish."""
        deadline = time.monotonic() + timeout
        with self._active_lock:
            while self._active and time.monotonic() < deadline:
                self._active_lock.wait(deadline - time.monotonic())

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            with contextlib.suppress(OSError):
                request.sendall(_json(503, "Service Unavailable", {"error": "busy"}, True))
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        with self._active_lock:
            self._active += 1
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()
            with self._active_lock:
                self._active -= 1
                self._active_lock.notify_all()


class _Handler(socketserver.BaseRequestHandler):
    server: PreviewServer

    def handle(self) -> None:
        Conversation(self.request, self.server.keys, self.server.backend).run()
