"""The asyncio client's I/O: performs the plans' effects (`effects`) as coroutines.

Requests go over `transport.AsyncApi`, execs over `transport.AsyncExecSocket` (aiohttp on
the caller's event loop, ADR 0011: no thread per call), and stdin is written by a task
while the caller's coroutine reads. `awaitable` makes a plan into a coroutine method of a
shell (`AsyncClient`, `AsyncSandbox`, `AsyncFiles`) with the plan's own parameters and
docstring. One client may serve several event loops, one after another.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

import aiohttp

from openblox.client import effects
from openblox.client.effects import Plan, Shell, Steps, shell_signature
from openblox.names import CONTAINER_NAME
from openblox.transport import Session
from openblox.transport.async_api import AsyncApi
from openblox.transport.async_exec import AsyncExecSocket
from openblox.transport.frames import exec_path
from openblox.transport.rest import Call, Watch

P = ParamSpec("P")
T = TypeVar("T")
S_co = TypeVar("S_co", covariant=True)

# The tasks writing the stdin of a call's exec sockets, by socket.
StdinTasks = dict[object, "asyncio.Task[None]"]


class AsyncIO:
    """One cluster, as one identity, for coroutines on any one event loop at a time."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.api = AsyncApi(session, user_agent="openblox-client-async")

    async def aclose(self) -> None:
        """Close this loop's connections (a later call opens new ones)."""
        await self.api.aclose()

    async def run(self, plan: Plan[T]) -> T:
        """Perform the plan's effects in turn, and return what it returns."""
        steps = Steps(plan)
        async for _ in self.drive(steps):
            pass
        return steps.result

    async def drive(self, steps: Steps[Any]) -> AsyncGenerator[Any, None]:
        """Perform the plan's effects in turn, handing over each item it emits. What it
        opened and did not close is closed when it ends, returned, raised or abandoned."""
        stdin_tasks: StdinTasks = {}
        try:
            for effect in steps:
                for item in steps.emitted():
                    yield item
                with steps.answering():
                    steps.answer(await self._perform(effect, stdin_tasks))
            for item in steps.emitted():
                yield item
        finally:
            steps.close()
            for handle in steps.opened:
                await _close(handle, stdin_tasks)

    async def open_exec(
        self, namespace: str, pod: str, argv: Sequence[str], *, stdin: bool, timeout: float
    ) -> AsyncExecSocket:
        """An exec stream in the pod's sandbox container (ExecStreamError if refused)."""
        path = exec_path(namespace, pod, CONTAINER_NAME, argv, stdin=stdin)
        return await AsyncExecSocket.open(self.api, path, to=f"{namespace}/{pod}", timeout=timeout)

    async def _perform(self, effect: effects.Effect, stdin_tasks: StdinTasks) -> Any:
        match effect:
            case effects.Next(source):
                return await anext(cast(AsyncIterator[Any], source), None)
            case Call():
                return await self.api.send(effect)
            case effects.Probe(call):
                return await self._probe(call)
            case effects.Frames(socket, deadline):
                return cast(AsyncExecSocket, socket).frames(deadline)
            case effects.OpenExec(namespace, pod, argv, stdin, timeout):
                return await self.open_exec(namespace, pod, argv, stdin=stdin, timeout=timeout)
            case Watch():
                return self.api.watch(effect)
            case effects.SendStdin(socket, data):
                # A task, not a thread: it writes while the caller's coroutine reads.
                written = _send_all(cast(AsyncExecSocket, socket), data)
                stdin_tasks[socket] = asyncio.create_task(written)
            case effects.Close(handle):
                await _close(handle, stdin_tasks)
            case effects.Sleep(seconds):
                await asyncio.sleep(seconds)
        return None

    async def _probe(self, call: Call) -> Any:
        try:
            return await self.api.send(call)
        except (OSError, TimeoutError, aiohttp.ClientError) as error:
            raise effects.Unreachable(repr(error)) from error


async def _send_all(socket: AsyncExecSocket, data: bytes) -> None:
    try:
        await socket.send_stdin(data)
        await socket.close_stdin()
    except Exception:  # the reader reports the broken stream; nothing to add here
        pass


async def _close(handle: object, stdin_tasks: StdinTasks) -> None:
    """Close a handle: an exec socket after the task writing its stdin is stopped, or a
    source (a watch)."""
    task = stdin_tasks.pop(handle, None)
    if task is not None and not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    with contextlib.suppress(Exception):
        if isinstance(handle, AsyncExecSocket):
            await handle.close()
        else:
            await cast(Any, handle).aclose()


def awaitable(
    step: Callable[Concatenate[S_co, P], Plan[T]],
) -> Callable[Concatenate[Shell[AsyncIO, S_co], P], Coroutine[Any, Any, T]]:
    """The plan `step` as a coroutine method of a shell, with its parameters and docstring."""

    @functools.wraps(step)
    async def call(self: Shell[AsyncIO, S_co], /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self._io.run(step(self._steps, *args, **kwargs))

    call.__signature__ = shell_signature(step)  # type: ignore[attr-defined]
    return call
