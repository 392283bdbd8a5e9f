"""The request path to the API server for asyncio callers, over aiohttp (ADR 0010).

The twin of `sync_api.Api`, built on the same pure core: paths, targets, headers and bodies
from `rest`, the typed errors of `errors` (NotFound, Conflict, Forbidden, ...), the
credentials of `session.Session`. No call runs on a thread: TLS is the event loop's own
(memory BIOs), and every request is a coroutine. One aiohttp session per event loop keeps
the keep-alive connections; it is made on first use inside the running loop, and made
again if the caller moved to another loop (a second `asyncio.run`).

A 401 makes the session fetch its token again and the request is sent once more, as in
the blocking path.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from yarl import URL

from openblox.names import COMMAND
from openblox.transport.errors import Unauthorized, api_error
from openblox.transport.rest import (
    JSON,
    MERGE_PATCH,
    decode_body,
    encode_body,
    headers,
    target,
    watch_event,
    watch_params,
)
from openblox.transport.session import Session

REQUEST_TIMEOUT_SECONDS = 30.0
# A watch line is one object; Sandboxes and pods are a few KiB, a full one far less than this.
WATCH_LINE_LIMIT = 16 * 1024 * 1024


class AsyncApi:
    """Requests with one session's credentials, from coroutines."""

    def __init__(self, session: Session, *, user_agent: str = COMMAND) -> None:
        self.session = session
        self._user_agent = user_agent
        parts = urlsplit(session.server)
        self._origin = f"{parts.scheme}://{parts.netloc}"
        self._prefix = parts.path.rstrip("/")
        self._http: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def http(self) -> aiohttp.ClientSession:
        """The aiohttp session of the running loop (made here, inside it, on first use)."""
        loop = asyncio.get_running_loop()
        if self._http is None or self._loop is not loop or self._http.closed:
            # A session belongs to the loop it was made in; the old loop is gone or not
            # running, so its connections cannot be closed from here and are dropped.
            self._http = aiohttp.ClientSession(
                # limit=0: no cap on open connections. Every exec holds one for its whole
                # run, and a cap would queue concurrent execs behind each other.
                connector=aiohttp.TCPConnector(limit=0, ssl=self._ssl()),
                auto_decompress=False,
                skip_auto_headers=("Accept-Encoding",),
            )
            self._loop = loop
        return self._http

    def _ssl(self) -> Any:
        return self.session.ssl_context() if self._origin.startswith("https:") else False

    @property
    def server_hostname(self) -> str | None:
        """The name the server's certificate is checked against, when not the host's."""
        return self.session.credentials.tls_server_name

    async def aclose(self) -> None:
        """Close the connections of the running loop's session."""
        if self._http is not None and self._loop is asyncio.get_running_loop():
            await self._http.close()
        self._http = None

    def url(self, request_path: str, params: Mapping[str, Any] | None = None) -> URL:
        # Already quoted by `target`: yarl must not quote it again.
        return URL(self._origin + target(self._prefix, request_path, params), encoded=True)

    def _headers(self, content_type: str | None) -> dict[str, str]:
        return headers(self.session.authorization(), content_type, self._user_agent)

    async def request(
        self,
        method: str,
        request_path: str,
        body: Any = None,
        *,
        params: Mapping[str, Any] | None = None,
        content_type: str = JSON,
    ) -> dict[str, Any]:
        try:
            return await self._send(method, request_path, body, params, content_type)
        except Unauthorized:
            if not self.session.refreshable:
                raise
            self.session.invalidate()  # a rotated or expired token: fetch it once more
            return await self._send(method, request_path, body, params, content_type)

    async def _send(
        self,
        method: str,
        request_path: str,
        body: Any,
        params: Mapping[str, Any] | None,
        content_type: str,
    ) -> dict[str, Any]:
        payload = encode_body(body)
        async with self.http().request(
            method,
            self.url(request_path, params),
            data=payload,
            headers=self._headers(content_type if payload is not None else None),
            timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_SECONDS),
            server_hostname=self.server_hostname,
        ) as response:
            data = await response.read()
            if response.status >= 400:
                raise api_error(response.status, response.reason or "", data)
        return decode_body(data)

    async def get(self, request_path: str, **params: Any) -> dict[str, Any]:
        return await self.request("GET", request_path, params=params)

    async def post(self, request_path: str, body: Any) -> dict[str, Any]:
        return await self.request("POST", request_path, body)

    async def patch(
        self, request_path: str, body: Any, content_type: str = MERGE_PATCH
    ) -> dict[str, Any]:
        return await self.request("PATCH", request_path, body, content_type=content_type)

    async def delete(self, request_path: str, body: Any = None) -> dict[str, Any]:
        return await self.request("DELETE", request_path, body)

    async def watch(
        self,
        request_path: str,
        *,
        resource_version: str | None,
        timeout_seconds: int,
        **params: Any,
    ) -> AsyncIterator[dict[str, Any]]:
        """Events of one watch request; ends when the server closes it. An ERROR event (a
        410 for a starting point too old) raises its typed error (`rest.watch_event`)."""
        where = self.url(
            request_path,
            watch_params(
                params, resource_version=resource_version, timeout_seconds=timeout_seconds
            ),
        )
        async with self.http().get(
            where,
            headers=self._headers(None),
            timeout=aiohttp.ClientTimeout(total=timeout_seconds + 30.0),
            server_hostname=self.server_hostname,
        ) as response:
            if response.status >= 400:
                raise api_error(response.status, response.reason or "", await response.read())
            buffer = b""
            async for piece in response.content.iter_any():
                buffer += piece
                if len(buffer) > WATCH_LINE_LIMIT:
                    raise ValueError(f"a watch event is over {WATCH_LINE_LIMIT} bytes")
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    event = watch_event(line)
                    if event is not None:
                        yield event
            with contextlib.suppress(ValueError):
                event = watch_event(buffer)
                if event is not None:
                    yield event
