"""Both clients over one fake cluster: an API server that answers from a script, and exec
sockets that replay frames. The shells' own I/O (`SyncIO`, `AsyncIO`) runs as it does
against a real cluster; only the transport under it is faked, so a test written once
checks the blocking and the asyncio client alike (`both`, `call`)."""

from __future__ import annotations

import asyncio
import inspect
import json
import threading
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import pytest

from openblox.client import AsyncClient, Client
from openblox.client.async_io import AsyncIO
from openblox.client.effects import Plan
from openblox.client.sync_io import SyncIO
from openblox.transport import STDOUT, Credentials, ExecSocket, Frame, Session
from openblox.transport.async_exec import AsyncExecSocket
from openblox.transport.rest import Call, Watch

SUCCESS = Frame(3, b'{"status": "Success"}')
T = TypeVar("T")


def framed(tag: bytes, payload: bytes) -> bytes:
    """One frame of the supervisor's output."""
    return tag + len(payload).to_bytes(4, "big") + payload


def supervised(stdout: bytes = b"", stderr: bytes = b"", exit_code: int = 0) -> list[Frame]:
    """The frames of an exec whose supervisor reports `exit_code` after the output."""
    verdict = {"exit_code": exit_code, "timed_out": False, "truncated": False, "signal": 0}
    data = framed(b"S", b"")
    data += framed(b"O", stdout) if stdout else b""
    data += framed(b"E", stderr) if stderr else b""
    data += framed(b"R", json.dumps(verdict).encode())
    return [Frame(STDOUT, data), SUCCESS]


def sandbox_body(name: str = "box", ready: bool = True, **status: Any) -> dict[str, Any]:
    condition = {"type": "Ready", "status": "True" if ready else "False", "reason": "Ready"}
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": "uid-1", "resourceVersion": "1"},
        "spec": {"profile": "code-exec"},
        "status": {"podName": f"{name}-pod", "conditions": [condition], **status},
    }


class Script:
    """What the fake API server answers and what it was asked, the same for both shells.

    `answers[(method, path)]` are taken in turn (an exception is raised); a request with
    none left gets `{}`. `watches` are the events of each watch in turn. `execs` are the
    frames of each exec stream in turn.
    """

    def __init__(self) -> None:
        self.answers: dict[tuple[str, str], list[Any]] = {}
        self.requests: list[tuple[str, str]] = []
        self.watches: list[list[dict[str, Any]]] = []
        self.execs: list[Any] = []
        self.argv: list[list[str]] = []
        self.sockets: list[Any] = []

    def on(self, method: str, path: str, *answers: Any) -> Script:
        self.answers.setdefault((method, path), []).extend(answers)
        return self

    def answer(self, method: str, path: str) -> dict[str, Any]:
        self.requests.append((method, path))
        queued = self.answers.get((method, path)) or [{}]
        found = queued.pop(0) if len(queued) > 1 else queued[0]
        if isinstance(found, BaseException):
            raise found
        return dict(found)

    def events(self) -> list[dict[str, Any]]:
        self.requests.append(("WATCH", ""))
        return self.watches.pop(0)

    def next_exec(self, argv: Sequence[str]) -> Any:
        """The next exec's frames, or a socket to hand out as it is (an exception, raised:
        the API server refused the exec)."""
        self.argv.append(list(argv))
        found = self.execs.pop(0)
        if isinstance(found, BaseException):
            raise found
        return found


class ScriptedSocket(ExecSocket):
    """An exec stream that replays frames once the caller's stdin is in (if it sends any)."""

    def __init__(self, frames: Iterable[Frame], stdin: bool) -> None:
        self._frames, self.closed, self.stdin = frames, False, bytearray()
        self.stdin_closed = threading.Event()
        if not stdin:
            self.stdin_closed.set()

    def send_stdin(self, data: bytes) -> None:
        self.stdin += data

    def close_stdin(self) -> None:
        self.stdin_closed.set()

    def frames(self, deadline: float) -> Iterator[Frame]:
        # Stdin is written beside the reading: wait for it, as a command reading it would.
        assert self.stdin_closed.wait(5), "stdin was never sent"
        yield from self._frames

    def close(self) -> None:
        self.closed = True


class ScriptedAsyncSocket(AsyncExecSocket):
    def __init__(self, frames: Iterable[Frame], stdin: bool) -> None:
        self._frames, self.closed, self.stdin = frames, False, bytearray()
        self.stdin_closed = asyncio.Event()
        if not stdin:
            self.stdin_closed.set()

    async def send_stdin(self, data: bytes) -> None:
        self.stdin += data

    async def close_stdin(self) -> None:
        self.stdin_closed.set()

    async def frames(self, deadline: float) -> AsyncIterator[Frame]:
        await asyncio.wait_for(self.stdin_closed.wait(), 5)
        for frame in self._frames:
            yield frame

    async def close(self) -> None:
        self.closed = True


class ScriptedApi:
    def __init__(self, script: Script) -> None:
        self.script = script

    def send(self, call: Call) -> dict[str, Any]:
        return self.script.answer(call.method, call.path)

    def watch(self, *_: Any, **__: Any) -> Iterator[dict[str, Any]]:
        yield from self.script.events()


class ScriptedAsyncApi:
    def __init__(self, script: Script) -> None:
        self.script = script

    async def send(self, call: Call) -> dict[str, Any]:
        return self.script.answer(call.method, call.path)

    async def watch(self, _: Watch) -> AsyncIterator[dict[str, Any]]:
        for event in self.script.events():
            yield event

    async def aclose(self) -> None:
        pass


class ScriptedIO(SyncIO):
    def __init__(self, script: Script) -> None:
        self.script = script
        self.api = ScriptedApi(script)  # type: ignore[assignment]

    def open_exec(
        self, namespace: str, pod: str, argv: Sequence[str], *, stdin: bool, timeout: float
    ) -> ExecSocket:
        found = self.script.next_exec(argv)
        socket = found if isinstance(found, ExecSocket) else ScriptedSocket(found, stdin)
        self.script.sockets.append(socket)
        return socket


class ScriptedAsyncIO(AsyncIO):
    def __init__(self, script: Script) -> None:
        self.script = script
        self.api = ScriptedAsyncApi(script)  # type: ignore[assignment]

    async def open_exec(
        self, namespace: str, pod: str, argv: Sequence[str], *, stdin: bool, timeout: float
    ) -> AsyncExecSocket:
        found = self.script.next_exec(argv)
        socket = found if isinstance(found, AsyncExecSocket) else ScriptedAsyncSocket(found, stdin)
        self.script.sockets.append(socket)
        return socket


CLIENTS = [Client, AsyncClient]


def both(test: Any) -> Any:
    """Run `test(client)` once with each client, over the same script."""
    return pytest.mark.parametrize("shell", CLIENTS, ids=["sync", "async"])(test)


def make_client(shell: type[Client] | type[AsyncClient], script: Script) -> Any:
    """A client of `shell`'s kind whose I/O runs against `script`."""
    session = Session(Credentials(server="https://api.invalid", namespace="ns", token="t"))
    original = Session.discover
    Session.discover = classmethod(lambda cls, *_: session)  # type: ignore[method-assign,assignment]
    try:
        client = shell()
    finally:
        Session.discover = original  # type: ignore[method-assign]
    client._io = ScriptedIO(script) if shell is Client else ScriptedAsyncIO(script)
    return client


def call(value: Any) -> Any:
    """What a call of either client returned: awaited, for the async one."""
    if inspect.iscoroutine(value):
        return asyncio.run(value)
    return value


def run(shell: type[Client] | type[AsyncClient], script: Script, plan: Plan[T]) -> T:
    """`plan` performed by the I/O of `shell`'s kind, against `script`."""
    io = ScriptedIO(script) if shell is Client else ScriptedAsyncIO(script)
    result: T = call(io.run(plan))
    return result
