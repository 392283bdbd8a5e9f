"""One command under the in-sandbox supervisor, for asyncio callers: the twin of `supervised`.

The frames are decoded by the same `_FrameDecoder` (output cap, verdict checks), the
outcome made by the same `_RunParts`, and the same rule decides when the native
supervisor was missing; only the waiting is different:
output is read by the caller's coroutine and stdin written by a task on the same loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from datetime import datetime
from typing import Any, NoReturn

from openblox.client.errors import stream_error
from openblox.client.results import ExecResult
from openblox.client.supervised import (
    OutputChunk,
    _FrameDecoder,
    _RunParts,
    _supervisor_missing,
    supervised_output,
)
from openblox.denials import ExecOutcome
from openblox.transport import ExecStreamError
from openblox.transport.async_exec import AsyncExecSocket

# The twins of `supervised.ResultMaker` and `supervised.BrokenHandler`, as coroutines.
AsyncResultMaker = Callable[[ExecOutcome, float], Awaitable[ExecResult]]
AsyncBrokenHandler = Callable[[bytes, bytearray, datetime], Coroutine[Any, Any, NoReturn]]


class _AsyncSupervisedRun(_RunParts):
    """Reads one supervised exec to its verdict; `chunks()` yields output on the way."""

    def __init__(
        self,
        socket: AsyncExecSocket,
        *,
        make_result: AsyncResultMaker,
        on_broken: AsyncBrokenHandler,
        stdin: bytes | None,
        timeout: float,
        cap: int,
        argv: tuple[str, ...],
        cwd: str | None,
        started_at: datetime,
        fallback: Callable[[], Awaitable[AsyncExecSocket]] | None = None,
    ) -> None:
        super().__init__(timeout=timeout, cap=cap, argv=argv, cwd=cwd, started_at=started_at)
        self._make_result = make_result
        self._on_broken = on_broken
        self._socket = socket
        self._stdin = stdin
        self._stdin_task: asyncio.Task[None] | None = None
        self._fallback = fallback
        self._send_stdin()

    def _send_stdin(self) -> None:
        if self._stdin is not None:
            # A task, not a thread: it writes while the caller's coroutine reads.
            self._stdin_task = asyncio.create_task(_send_all(self._socket, self._stdin))

    async def collect(self) -> ExecResult:
        async for _ in self.chunks():
            pass
        return self.result

    async def close(self) -> None:
        if self._stdin_task is not None and not self._stdin_task.done():
            self._stdin_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._stdin_task
        await self._socket.close()

    async def chunks(self, keep: bool = True) -> AsyncIterator[OutputChunk]:
        self._decoder.keep = keep
        while True:
            output = supervised_output()
            try:
                async for frame in self._socket.frames(self._deadline()):
                    if stdout := output.feed(frame):
                        for chunk in self._decoder.feed(stdout):
                            yield chunk
            except TimeoutError:
                await self._finish(self._timed_out())
                return
            except ExecStreamError as error:
                raise stream_error(error, "the exec") from error
            finally:
                await self.close()
            verdict = self._decoder.verdict
            if (
                verdict is None
                and self._fallback
                and _supervisor_missing(output.status, self._decoder)
            ):
                self._socket, self._fallback = await self._fallback(), None
                self._decoder = _FrameDecoder(self._cap, keep=keep)
                self._send_stdin()
                continue
            if verdict is None:
                await self._on_broken(output.status, output.stderr, self._started_at)
            break
        await self._finish(self._verdict_outcome(verdict))

    async def _finish(self, outcome: ExecOutcome) -> None:
        self._result = await self._make_result(outcome, time.monotonic() - self._started)


class AsyncExecStream:
    """`Sandbox.stream` for asyncio callers: `async for chunk in stream`, then `.result`."""

    def __init__(self, run: _AsyncSupervisedRun) -> None:
        self._run = run

    def __aiter__(self) -> AsyncIterator[OutputChunk]:
        # Chunks go to the caller, not into memory: only the tail the denial classifier
        # needs is kept.
        return self._run.chunks(keep=False)

    async def __aenter__(self) -> AsyncExecStream:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self._run.close()

    @property
    def result(self) -> ExecResult:
        return self._run.result


async def _send_all(socket: AsyncExecSocket, data: bytes) -> None:
    try:
        await socket.send_stdin(data)
        await socket.close_stdin()
    except Exception:  # the reader reports the broken stream; nothing to add here
        pass
