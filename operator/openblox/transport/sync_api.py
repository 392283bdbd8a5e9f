"""The one request path to the API server, blocking, JSON in and out, over http.client.

Thread-safe: one keep-alive connection per thread. A refused request raises the typed
error of `errors.py` (NotFound, Conflict, Forbidden, Invalid, ...); a 401 makes the
session fetch its token again and the request is sent once more.
"""

from __future__ import annotations

import http.client
import ssl
import threading
from collections.abc import Callable, Generator, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any
from urllib.parse import urlsplit

from openblox.names import COMMAND
from openblox.transport.errors import api_error
from openblox.transport.rest import (
    JSON,
    MERGE_PATCH,
    Call,
    Endpoint,
    Exchange,
    Prepared,
    Watch,
    target,
    watch_event,
)
from openblox.transport.session import Session

REQUEST_TIMEOUT_SECONDS = 30.0
# Errors of a keep-alive connection the server closed while it sat idle.
_STALE = (
    http.client.RemoteDisconnected,
    http.client.BadStatusLine,
    ConnectionError,
    ssl.SSLEOFError,
)

# Entered around every request that changes something: it raises to refuse the request,
# and is left once the answer came (the operator's fence counts writes in flight).
WriteGuard = Callable[[], AbstractContextManager[object]]


class Api:
    """Requests with one session's credentials. `write_guard`, if given, is entered around
    every request that changes something; it raises to refuse it (the operator's fence: a
    replica that does not hold the Lease writes nothing). `request_timeout` bounds each
    socket operation of a request (not of a watch)."""

    def __init__(
        self,
        session: Session,
        write_guard: WriteGuard | None = None,
        *,
        user_agent: str = COMMAND,
        extra_headers: Mapping[str, str] | None = None,
        request_timeout: float = REQUEST_TIMEOUT_SECONDS,
    ) -> None:
        self.session = session
        self._write_guard = write_guard
        self.request_timeout = request_timeout
        self._endpoint = Endpoint(session.server, user_agent, extra_headers)
        parts = urlsplit(session.server)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or "localhost"
        self._port = parts.port or (443 if self._https else 80)
        self._local = threading.local()

    def guarded(self, write_guard: WriteGuard) -> Api:
        """The same credentials, with every write inside `write_guard`."""
        return Api(
            self.session,
            write_guard,
            user_agent=self._endpoint.user_agent,
            extra_headers=self._endpoint.extra_headers,
            request_timeout=self.request_timeout,
        )

    def guard_write(self) -> None:
        """Refuse now (the guard raises) if this client may not change anything."""
        with self._writing():
            pass

    def _writing(self) -> AbstractContextManager[object]:
        return self._write_guard() if self._write_guard is not None else nullcontext()

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        if self._https:
            return _HTTPSConnection(
                self._host,
                self._port,
                timeout=timeout,
                context=self.session.ssl_context(),
                server_hostname=self.session.credentials.tls_server_name,
            )
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def url(self, request_path: str, params: Mapping[str, Any] | None = None) -> str:
        return target(self._endpoint.prefix, request_path, params)

    def request(
        self,
        method: str,
        request_path: str,
        body: Any = None,
        *,
        params: Mapping[str, Any] | None = None,
        content_type: str = JSON,
    ) -> dict[str, Any]:
        return self.send(Call(method, request_path, body, params, content_type))

    def send(self, call: Call) -> dict[str, Any]:
        """The answer to `call` (`request`'s, as one value)."""
        return self._exchange(call).body()

    def text(self, request_path: str, **params: Any) -> str:
        """A GET whose answer is text, not JSON: a pod's log."""
        content = self._exchange(Call("GET", request_path, params=params)).content()
        return content.decode("utf-8", "replace")

    def _exchange(self, call: Call) -> Exchange:
        exchange = Exchange(self._endpoint, self.session, call)
        with nullcontext() if call.method == "GET" else self._writing():
            while (prepared := exchange.next_request()) is not None:
                exchange.receive(*self._send(prepared))
        return exchange

    def _send(self, prepared: Prepared) -> tuple[int, str, bytes]:
        """The answer's status, reason and body, on this thread's keep-alive connection."""
        for attempt in (1, 2):
            connection: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
            fresh = connection is None
            if connection is None:
                connection = self._connection(self.request_timeout)
                self._local.conn = connection
            try:
                connection.request(
                    prepared.method,
                    prepared.target,
                    body=prepared.body,
                    headers=dict(prepared.headers),
                )
                response = connection.getresponse()
                data = response.read()
            except _STALE:
                # The server closed an idle keep-alive connection: open a new one, once.
                connection.close()
                self._local.conn = None
                if fresh or attempt == 2:
                    raise
                continue
            except BaseException:
                connection.close()
                self._local.conn = None
                raise
            return response.status, response.reason, data
        raise AssertionError("unreachable")

    def get(self, request_path: str, **params: Any) -> dict[str, Any]:
        return self.request("GET", request_path, params=params)

    def post(self, request_path: str, body: Any) -> dict[str, Any]:
        return self.request("POST", request_path, body)

    def put(self, request_path: str, body: Any) -> dict[str, Any]:
        return self.request("PUT", request_path, body)

    def patch(
        self, request_path: str, body: Any, content_type: str = MERGE_PATCH
    ) -> dict[str, Any]:
        return self.request("PATCH", request_path, body, content_type=content_type)

    def delete(self, request_path: str, body: Any = None) -> dict[str, Any]:
        return self.request("DELETE", request_path, body)

    def watch(
        self,
        request_path: str,
        *,
        resource_version: str | None,
        timeout_seconds: int,
        bookmarks: bool = False,
        **params: Any,
    ) -> Generator[dict[str, Any], None, None]:
        """Events of one watch request (ends when the server closes it), on its own connection;
        BOOKMARK events too, with `bookmarks`."""
        connection = self._connection(timeout_seconds + 30.0)
        watch = Watch(request_path, resource_version, timeout_seconds, params, bookmarks)
        prepared = self._endpoint.prepare_watch(watch, self.session.authorization())
        try:
            connection.request("GET", prepared.target, headers=dict(prepared.headers))
            response = connection.getresponse()
            if response.status >= 400:
                raise api_error(response.status, response.reason, response.read())
            for line in response:
                event = watch_event(line)
                if event is not None:
                    yield event
        finally:
            connection.close()


class _HTTPSConnection(http.client.HTTPSConnection):
    """HTTPS whose certificate is checked for a kubeconfig's `tls-server-name`, when it
    names one, instead of the host dialled."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        timeout: float,
        context: ssl.SSLContext,
        server_hostname: str | None,
    ) -> None:
        super().__init__(host, port, timeout=timeout, context=context)
        self._tls_context = context
        self._server_hostname = server_hostname

    def connect(self) -> None:
        if self._server_hostname is None:
            super().connect()
            return
        http.client.HTTPConnection.connect(self)
        self.sock = self._tls_context.wrap_socket(self.sock, server_hostname=self._server_hostname)
