"""One client connection to the preview proxy: each request's token checked, then relayed.

The token is checked first, from the path alone: a forged, tampered, expired or
unknown-key token gets 403 and the connection is closed before its body is read and
before the backend (and so the API server) is asked for anything. A good token's request
is relayed over the connection's `Tunnel`, which is kept between requests to the same
sandbox and port. The token then bounds the conversation (permits.py): whatever is still
being relayed when it expires, or when its key leaves the ring, is cut.
"""

from __future__ import annotations

import contextlib
import io
import logging
import socket
import threading
from dataclasses import dataclass
from typing import Protocol, cast

from prometheus_client import Counter

from openblox.preview.http11 import (
    HOP_BY_HOP,
    REASONS,
    Head,
    HTTPError,
    body_framing,
    copy_chunked,
    copy_length,
    copy_until_eof,
    json_response,
    read_head,
    response_head,
    status_of,
)
from openblox.preview.permits import Cut, PermitWatch
from openblox.preview.relay import Tunnel
from openblox.preview.tokens import Grant, TokenError
from openblox.transport import ExecStreamError

log = logging.getLogger(__name__)

PREFIX = "/p/"
CLIENT_IDLE_SECONDS = 120.0
DENIED = Counter(
    "openblox_preview_denied", "Requests refused because of their token, by reason", ["reason"]
)
RELAYED = Counter("openblox_preview_relayed", "Requests relayed to a sandbox")


class Upstream(Protocol):
    def open(self, grant: Grant) -> Tunnel: ...


@dataclass(frozen=True)
class Request:
    head: Head
    method: str
    path: str
    version: str
    grant: Grant
    token: str


class Conversation:
    """One client connection: a series of requests, each checked, then relayed."""

    def __init__(self, sock: socket.socket, backend: Upstream, watch: PermitWatch) -> None:
        self._sock = sock
        self._backend = backend
        self._watch = watch
        self._permit = watch.permit(sock)
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
        except (HTTPError, Cut, OSError, ValueError, ExecStreamError) as error:
            self._last_word(error)
        finally:
            self._watch.release(self._permit)
            self._drop_tunnel()
            with contextlib.suppress(OSError):
                self._rfile.close()

    def _last_word(self, error: Exception) -> None:
        """What the client is told when the conversation ends early, if anything."""
        if self._permit.cut:
            # Whatever broke, the cut is why: the link expired or its key left the ring.
            reason = self._permit.refusal()
            if reason is not None:
                self._refuse(reason)
            return  # a reply was under way: closing is all that can be said
        if isinstance(error, HTTPError):
            with contextlib.suppress(OSError):
                self.send(
                    json_response(
                        error.status,
                        REASONS.get(error.status, "Error"),
                        {"error": str(error)},
                        True,
                    )
                )
        # Otherwise either side went away mid-message: nothing more can be said on it.

    def _refuse(self, reason: str) -> None:
        with contextlib.suppress(OSError):
            self.send(
                json_response(403, "Forbidden", {"error": "forbidden", "reason": reason}, True)
            )

    def _drop_tunnel(self) -> None:
        self._permit.detach()
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
            self.send(json_response(200, "OK", {"ok": True}, True))
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
            grant = self._permit.admit(token)
        except TokenError as error:
            DENIED.labels(error.reason).inc()
            self._refuse(error.reason)
            return False
        if not rest.startswith("/"):
            # /p/<token> or /p/<token>?q: send the browser under the prefix, so that
            # relative links resolve inside the preview.
            location = f"{PREFIX}{token}/{rest}"
            self.send(
                f"HTTP/1.1 308 Permanent Redirect\r\nLocation: {location}\r\n"
                "Content-Length: 0\r\n\r\n".encode("latin-1")
            )
            self._permit.idle()
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
        self._permit.ensure()  # no new tunnel (or retry) once the link is cut
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
        self._permit.attach(tunnel)
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
            status = status_of(reply)
            if 100 <= status < 200 and status != 101:
                self._permit.replying()
                self.send(response_head(reply, status, []))
                next_reply = read_head(upstream, 502)
                if next_reply is None:
                    raise HTTPError(502, "the sandbox's server closed after an interim reply")
                reply = next_reply
                continue
            break
        self._permit.replying(upgraded=status == 101 and upgrade)
        if status == 101 and upgrade:
            self.send(response_head(reply, status, [], keep_upgrade=True))
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
        self.send(response_head(reply, status, extra))
        if kind == "length":
            copy_length(upstream, self.send, size)
        elif kind == "chunked":
            copy_chunked(upstream, self.send)
        elif kind == "eof":
            copy_until_eof(upstream, self.send)
        if not upstream_keeps or kind == "eof":
            self._drop_tunnel()
        self._permit.idle()
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
