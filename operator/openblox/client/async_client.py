"""`openblox.AsyncClient`: the same surface as Client, for asyncio callers, with no threads.

Every call is a coroutine on the caller's event loop. It is the asyncio shell over the
same plans as `Client` (`client_steps`, `sandbox_steps`, `files`: the decisions, written
once), performed by `async_io` over aiohttp (ADR 0011, ADR 0017), with the credentials the
transport finds in its one documented order. So hundreds of concurrent execs from one loop
are hundreds of websockets, not threads, and the default executor's size caps nothing.

Close it with `await client.aclose()` (or `async with AsyncClient(...)`) to close its
connections; one client may serve several event loops, one after another.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine, Mapping
from typing import Any, Concatenate, ParamSpec, TypeVar

from openblox.client.async_io import AsyncIO, awaitable
from openblox.client.client_steps import ClientSteps
from openblox.client.effects import Plan, Shell, Steps, shell_signature
from openblox.client.files import FileSteps
from openblox.client.results import ExecResult
from openblox.client.sandbox_steps import SandboxSteps
from openblox.client.shells import ClientShell, SandboxShell, StreamShell
from openblox.client.supervised import OutputChunk
from openblox.transport import Session

__all__ = ["AsyncClient", "AsyncExecStream", "AsyncFiles", "AsyncSandbox"]

P = ParamSpec("P")
S = TypeVar("S")


class AsyncFiles:
    """Files inside the sandbox, moved as argv and stdin: no shell, so no quoting to get wrong."""

    def __init__(self, io: AsyncIO, steps: FileSteps) -> None:
        self._io = io
        self._steps = steps

    write = awaitable(FileSteps.write)
    read = awaitable(FileSteps.read)
    list = awaitable(FileSteps.list)
    remove = awaitable(FileSteps.remove)

    async def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        for entry in await self.list():
            yield entry


class AsyncExecStream(StreamShell):
    """`Sandbox.stream` for asyncio callers: `async for chunk in stream`, then `.result`."""

    def __init__(self, drive: AsyncGenerator[Any, None], steps: Steps[ExecResult]) -> None:
        super().__init__(steps)
        self._drive = drive

    def __aiter__(self) -> AsyncIterator[OutputChunk]:
        # Chunks go to the caller, not into memory: only the tail the denial classifier
        # needs is kept.
        return self._drive

    async def __aenter__(self) -> AsyncExecStream:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self._drive.aclose()


def streaming(
    step: Callable[Concatenate[S, P], Plan[ExecResult]],
) -> Callable[Concatenate[Shell[AsyncIO, S], P], Coroutine[Any, Any, AsyncExecStream]]:
    """The streaming plan `step` as a coroutine method that returns once the exec is open."""

    @functools.wraps(step)
    async def call(
        self: Shell[AsyncIO, S], /, *args: P.args, **kwargs: P.kwargs
    ) -> AsyncExecStream:
        run = Steps(step(self._steps, *args, **kwargs))
        output = self._io.drive(run)
        await anext(output)  # supervised.STARTED: the exec is open, its stdin on its way
        return AsyncExecStream(output, run)

    call.__signature__ = shell_signature(step)  # type: ignore[attr-defined]
    return call


class AsyncSandbox(SandboxShell):
    """A handle on one Sandbox: run commands and move files through `pods/exec`."""

    def __init__(self, io: AsyncIO, steps: SandboxSteps) -> None:
        super().__init__(steps)
        self._io = io
        self.files = AsyncFiles(io, steps.files)

    async def __aenter__(self) -> AsyncSandbox:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.delete()

    async def refresh(self) -> AsyncSandbox:
        """Read the Sandbox again (its status, its pod)."""
        await self._io.run(self._steps.refresh())
        return self

    delete = awaitable(SandboxSteps.delete)
    preview_url = awaitable(SandboxSteps.preview_url)
    exec = awaitable(SandboxSteps.exec)
    stream = streaming(SandboxSteps.stream)
    write_file = awaitable(SandboxSteps.write_file)
    read_file = awaitable(SandboxSteps.read_file)
    start_process = awaitable(SandboxSteps.start_process)
    processes = awaitable(SandboxSteps.processes)
    stop_process = awaitable(SandboxSteps.stop_process)
    logs = awaitable(SandboxSteps.logs)


class AsyncClient(ClientShell[AsyncSandbox]):
    """A connection to one cluster for asyncio callers; cheap to keep.

    Credentials are found in the transport's one order (`openblox.transport.credentials`),
    as for `Client`; the namespace defaults to the one of the same source.
    """

    def _connect(self, session: Session) -> None:
        self._io = AsyncIO(session)

    def _handle(self, body: Mapping[str, Any]) -> AsyncSandbox:
        # No lock: coroutines on one loop cannot interleave inside the activity debounce.
        steps = SandboxSteps(body, self._supervisors, contextlib.nullcontext())
        return AsyncSandbox(self._io, steps)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close this loop's connections (a later call opens new ones)."""
        await self._io.aclose()

    create = awaitable(ClientSteps[AsyncSandbox].create)
    get = awaitable(ClientSteps[AsyncSandbox].get)
    list = awaitable(ClientSteps[AsyncSandbox].list)
    delete = awaitable(ClientSteps[AsyncSandbox].delete)
    profiles = awaitable(ClientSteps[AsyncSandbox].profiles)
