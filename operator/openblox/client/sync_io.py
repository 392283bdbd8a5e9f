"""The blocking client's I/O: performs the plans' effects (`effects`) with blocking calls.

Requests go over `transport.Api` (http.client, a keep-alive connection per thread), execs
over `transport.ExecSocket` (websocket-client on the transport's duplex TLS), and stdin is
written by a thread while the caller's thread reads. `blocking` makes a plan into a method
of a shell (`Client`, `Sandbox`, `Files`) with the plan's own parameters and docstring.
Safe to share between threads: each call keeps its own handles.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar, cast

from openblox.client import effects
from openblox.client.effects import Plan, Shell, Steps, shell_signature
from openblox.names import CONTAINER_NAME
from openblox.transport import Api, Session
from openblox.transport.rest import Call, Watch

if TYPE_CHECKING:
    from openblox.transport.sync_exec import ExecSocket

P = ParamSpec("P")
T = TypeVar("T")
S_co = TypeVar("S_co", covariant=True)


class SyncIO:
    """One cluster, as one identity, for blocking calls."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.api = Api(session, user_agent="openblox-client")

    def run(self, plan: Plan[T]) -> T:
        """Perform the plan's effects in turn, and return what it returns."""
        steps = Steps(plan)
        for _ in self.drive(steps):
            pass
        return steps.result

    def drive(self, steps: Steps[Any]) -> Generator[Any, None, None]:
        """Perform the plan's effects in turn, handing over each item it emits. What it
        opened and did not close is closed when it ends, returned, raised or abandoned."""
        try:
            for effect in steps:
                yield from steps.emitted()
                with steps.answering():
                    steps.answer(self._perform(effect))
            yield from steps.emitted()
        finally:
            steps.close()
            for handle in steps.opened:
                _close_quietly(handle)

    def open_exec(
        self, namespace: str, pod: str, argv: Sequence[str], *, stdin: bool, timeout: float
    ) -> ExecSocket:
        """An exec stream in the pod's sandbox container (ExecStreamError if refused)."""
        # Loaded on the first exec: a client that only lists or creates never needs it.
        from openblox.transport.sync_exec import ExecSocket

        return ExecSocket(
            self.session, namespace, pod, CONTAINER_NAME, argv, stdin=stdin, timeout=timeout
        )

    def _perform(self, effect: effects.Effect) -> Any:
        match effect:
            case effects.Next(source):
                return next(cast(Iterator[Any], source), None)
            case Call():
                return self.api.send(effect)
            case effects.Probe(call):
                return self._probe(call)
            case effects.Frames(socket, deadline):
                return cast("ExecSocket", socket).frames(deadline)
            case effects.OpenExec(namespace, pod, argv, stdin, timeout):
                return self.open_exec(namespace, pod, argv, stdin=stdin, timeout=timeout)
            case Watch(path, since, seconds, params):
                return self.api.watch(
                    path, resource_version=since, timeout_seconds=seconds, **params
                )
            case effects.SendStdin(socket, data):
                # A thread, so the caller's thread reads output while stdin is written: a
                # command may answer before it has read all its input.
                threading.Thread(target=_send_all, args=(socket, data), daemon=True).start()
            case effects.Close(handle):
                _close_quietly(handle)
            case effects.Sleep(seconds):
                time.sleep(seconds)
        return None

    def _probe(self, call: Call) -> Any:
        try:
            return self.api.send(call)
        except (OSError, http.client.HTTPException) as error:
            raise effects.Unreachable(str(error)) from error


def _send_all(socket: ExecSocket, data: bytes) -> None:
    try:
        socket.send_stdin(data)
        socket.close_stdin()
    except Exception:  # the reader reports the broken stream; nothing to add here
        pass


def _close_quietly(handle: Any) -> None:
    with contextlib.suppress(Exception):
        handle.close()


def blocking(
    step: Callable[Concatenate[S_co, P], Plan[T]],
) -> Callable[Concatenate[Shell[SyncIO, S_co], P], T]:
    """The plan `step` as a blocking method of a shell, with its parameters and docstring."""

    @functools.wraps(step)
    def call(self: Shell[SyncIO, S_co], /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._io.run(step(self._steps, *args, **kwargs))

    call.__signature__ = shell_signature(step)  # type: ignore[attr-defined]
    return call
