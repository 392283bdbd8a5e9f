"""The request path to the API server for asyncio callers, over aiohttp (ADR 0010).

The twin of `sync_api.Api`, built on the same pure core: paths, targets, headers and bodies
from `rest`, the typed errors of `errors` (NotFound, Conflict, Forbidden, ...), the
credentials of `session.Session`. No call runs on a thread: TLS is the event loop's own
(memory BIOs), and every request is a coroutine. One aiohttp session per event loop keeps
the keep-alive connections; it is made on first use inside the running loop, and made
again if the caller moved to another loop (a second `asyncio.run`).

What to send and what an answer means is `rest`'s (`Endpoint`, `Exchange`), as for the
blocking path: a 401 makes the session fetch its token again and the request is sent once
more. The async client performs its plans' `Call`s and `Watch`es here (`send`, `watch`).
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
from openblox.transport.errors import api_error
from openblox.transport.rest import Call, Endpoint, Exchange, Prepared, Watch, target, watch_event
from openblox.transport.session import Session

REQUEST_TIMEOUT_SECONDS = 30.0
# A watch line is one object; Sandboxes and pods are a few KiB, a full one far less than this.
WATCH_LINE_LIMIT = 16 * 1024 * 1024


class AsyncApi:
    """Requests with one session's credentials, from coroutines."""

    def __init__(self, session: Session, *, user_agent: str = COMMAND) -> None:
        self.session = session
        self._endpoint = Endpoint(session.server, user_agent)
        parts = urlsplit(session.server)
        self._origin = f"{parts.scheme}://{parts.netloc}"
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
        return self._url(target(self._endpoint.prefix, request_path, params))

    def _url(self, request_target: str) -> URL:
        # Already quoted by `rest.target`: yarl must not quote it again.
        return URL(self._origin + request_target, encoded=True)

    async def send(self, call: Call) -> dict[str, Any]:
        """The answer to `call`: its decoded JSON body, or its typed error."""
        exchange = Exchange(self._endpoint, self.session, call)
        while (prepared := exchange.next_request()) is not None:
            exchange.receive(*(await self._send(prepared)))
        return exchange.body()

    async def _send(self, prepared: Prepared) -> tuple[int, str, bytes]:
        async with self.http().request(
            prepared.method,
            self._url(prepared.target),
            data=prepared.body,
            headers=prepared.headers,
            timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_SECONDS),
            server_hostname=self.server_hostname,
        ) as response:
            return response.status, response.reason or "", await response.read()

    async def watch(self, watch: Watch) -> AsyncIterator[dict[str, Any]]:
        """Events of one watch request; ends when the server closes it. An ERROR event (a
        410 for a starting point too old) raises its typed error (`rest.watch_event`)."""
        prepared = self._endpoint.prepare_watch(watch, self.session.authorization())
        async with self.http().get(
            self._url(prepared.target),
            headers=prepared.headers,
            timeout=aiohttp.ClientTimeout(total=watch.timeout_seconds + 30.0),
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
