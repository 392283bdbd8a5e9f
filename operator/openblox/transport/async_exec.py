"""One `pods/exec` over a websocket for asyncio callers: the twin of `sync_exec.ExecSocket`.

The same protocol (`v5.channel.k8s.io`, built and read by the pure `frames`), the same
errors (ExecStreamError with the refusal's status, TimeoutError past the deadline), over
aiohttp's websocket on the event loop's own TLS. Stdin may be written by one task while
another reads output: both are coroutines on one loop, so no lock and no thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import aiohttp

from openblox.transport.async_api import AsyncApi
from openblox.transport.errors import ExecStreamError
from openblox.transport.frames import (
    PROTOCOL,
    Frame,
    close_message,
    decode_frame,
    stdin_messages,
)

# How long closing may wait for the server's answer to our close frame.
CLOSE_TIMEOUT_SECONDS = 5.0
_WS_TIMEOUT = aiohttp.ClientWSTimeout(ws_receive=None, ws_close=CLOSE_TIMEOUT_SECONDS)
_ENDED = (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSING, aiohttp.WSMsgType.CLOSED)


class AsyncExecSocket:
    """One exec session. `async for frame in socket.frames(deadline)`; the last frame is
    the ERROR channel's Status. Open with `await AsyncExecSocket.open(...)`."""

    def __init__(self, websocket: aiohttp.ClientWebSocketResponse) -> None:
        self._websocket = websocket

    @classmethod
    async def open(cls, api: AsyncApi, path: str, *, to: str, timeout: float) -> AsyncExecSocket:
        """The exec at `path` (`frames.exec_path`, which the caller built); `to` names its
        pod in an error."""
        where = api.url(path)
        try:
            async with asyncio.timeout(timeout):
                websocket = await api.http().ws_connect(
                    where,
                    protocols=(PROTOCOL,),
                    headers=api.session.authorization(),
                    server_hostname=api.server_hostname,
                    # The exec's frames are what it read: no cap here (the caller caps output).
                    max_msg_size=0,
                    autoping=True,
                    timeout=aiohttp.ClientWSTimeout(
                        ws_receive=None, ws_close=CLOSE_TIMEOUT_SECONDS
                    ),
                )
        except aiohttp.WSServerHandshakeError as error:
            # aiohttp does not keep the refusal's body: the status says what matters (404:
            # no such pod; 403: not allowed), the reason phrase the rest.
            raise ExecStreamError(
                f"exec refused ({error.status}): {error.message}", error.status
            ) from error
        except (OSError, TimeoutError, aiohttp.ClientError) as error:
            raise ExecStreamError(f"could not open exec to {to}: {error!r}") from error
        if websocket.protocol != PROTOCOL:
            await websocket.close()
            raise ExecStreamError(
                f"API server does not speak {PROTOCOL} (got {websocket.protocol!r})"
            )
        return cls(websocket)

    async def send_stdin(self, data: bytes) -> None:
        for message in stdin_messages(data):
            await self._websocket.send_bytes(message)

    async def close_stdin(self) -> None:
        await self._websocket.send_bytes(close_message())

    async def frames(self, deadline: float) -> AsyncIterator[Frame]:
        """Frames until the server closes the stream; TimeoutError past `deadline`
        (time.monotonic()); ExecStreamError if the stream breaks."""
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("exec stream passed its deadline")
            try:
                async with asyncio.timeout(remaining):
                    message = await self._websocket.receive()
            except TimeoutError as error:
                raise TimeoutError("exec stream passed its deadline") from error
            except (OSError, aiohttp.ClientError) as error:
                raise ExecStreamError(f"exec stream broke: {error!r}") from error
            if message.type in _ENDED:
                return
            if message.type == aiohttp.WSMsgType.ERROR:
                raise ExecStreamError(f"exec stream broke: {message.data!r}")
            if message.type == aiohttp.WSMsgType.BINARY:
                frame = decode_frame(message.data)
                if frame is not None:
                    yield frame

    async def close(self) -> None:
        with contextlib.suppress(OSError, aiohttp.ClientError, TimeoutError):
            await self._websocket.close()
