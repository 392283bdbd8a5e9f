"""What a plan asks its shell to do: the client's one seam between deciding and doing I/O.

Every call of `Client` and `AsyncClient` is written once, as a plan: a generator that
yields an effect (`Call`, `Watch`, `OpenExec`, ...) each time it needs the cluster, and
is sent the answer, or has the error thrown in, as a plain call would have returned or
raised it. A plan does no I/O and knows no event loop, so the decisions in it (which
request, what a refusal means, what to retry, how an exec is read and explained) are the
same for both clients by construction. `sync_io` performs effects with blocking calls,
`async_io` with coroutines on the caller's loop (ADR 0017).

Handles (an exec socket, a watch, a stream of frames) are opaque here: a plan only passes
back what the shell gave it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

from openblox.transport.rest import Call, Watch

T = TypeVar("T")
IO_co = TypeVar("IO_co", covariant=True)
S_co = TypeVar("S_co", covariant=True)


class Probe(NamedTuple):
    """The request `call`, whose failure to reach the API server at all is thrown in as
    `Unreachable` (a plain `Call`'s is thrown in as the stack raised it)."""

    call: Call


class OpenExec(NamedTuple):
    """A `pods/exec` websocket in the container `sandbox`; the answer is its handle. A
    refusal is thrown in as the transport's ExecStreamError, with the status."""

    namespace: str
    pod: str
    argv: tuple[str, ...]
    stdin: bool
    timeout: float


class Frames(NamedTuple):
    """The exec's frames as a source (`Next`), read until `deadline` (monotonic)."""

    socket: object
    deadline: float


class SendStdin(NamedTuple):
    """Write `data` and close stdin beside the reading (a thread, or a task): the command may
    answer before it has read it all. A failure there is left for the reader to find."""

    socket: object
    data: bytes


class Sleep(NamedTuple):
    seconds: float


class _One(NamedTuple):
    """An effect on one thing, `what`."""

    what: object


class Next(_One):
    """The next item of the source `what` (a `Watch`, `Frames`); None once it ended."""

    __slots__ = ()


class Close(_One):
    """Close the handle `what` now. Whatever a plan opened and did not close, its shell
    closes when the plan ends, however it ends."""

    __slots__ = ()


class Emit(_One):
    """Not performed: `what` is handed to the caller of a streaming call, as it comes."""

    __slots__ = ()


# A `Call` (`rest.Call`) is a request: its answer is the decoded JSON body, a refusal is
# thrown in as the transport's typed error (NotFound, Conflict, ...). A `Watch`
# (`rest.Watch`) is a watch request: its answer is a source of events (`Next`). Effects are
# named tuples: a dataclass would cost every client a millisecond of its import, each.
Effect = Call | Probe | Watch | OpenExec | Frames | Next | SendStdin | Close | Sleep | Emit
Plan = Generator[Effect, Any, T]


class Unreachable(Exception):
    """The API server could not be reached for a `Probe`'s request; the stack's
    own error is the cause, and `detail` says it in the words its shell uses."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class Steps(Generic[T]):
    """One plan, stepped by a shell: iterate for the effects to perform (the iteration ends
    once the plan has returned `result`), perform each inside `answering()` and give what
    it answered to `answer`; an error it raised goes to the plan instead, as a call's would.
    What the plan emits is kept for `emitted()`, for the shell to hand on before it
    performs the next effect.

    It keeps what the plan opened (exec sockets, watches) and has not closed, so the shell
    closes those when the plan ends, however it ends."""

    def __init__(self, plan: Plan[T]) -> None:
        self._plan = plan
        self._effect: Effect | None = None
        self._answer: Any = None
        self._error: Exception | None = None
        self._emitted: list[object] = []
        self.opened: list[object] = []
        self.done = False
        self._result: T | None = None

    def __iter__(self) -> Iterator[Effect]:
        while True:
            answer, error = self._answer, self._error
            self._answer = self._error = None
            try:
                effect = self._plan.throw(error) if error is not None else self._plan.send(answer)
            except StopIteration as stop:
                self.done, self._result = True, stop.value
                return
            if isinstance(effect, Emit):
                self._emitted.append(effect.what)
                continue
            if isinstance(effect, Close) and effect.what in self.opened:
                self.opened.remove(effect.what)
            self._effect = effect
            yield effect

    def emitted(self) -> Sequence[object]:
        """What the plan emitted since this was last asked."""
        if not self._emitted:
            return ()
        items, self._emitted = self._emitted, []
        return items

    def answering(self) -> Steps[T]:
        """Around performing one effect: an error it raises is the plan's to handle."""
        return self

    def __enter__(self) -> None:
        pass

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, _: object
    ) -> bool:
        # A class, not contextlib's decorator: this is entered for every effect.
        if isinstance(error, Exception):
            self._error = error
            return True
        return False

    def answer(self, value: object) -> None:
        if isinstance(self._effect, OpenExec | Watch):
            self.opened.append(value)
        self._answer = value

    def close(self) -> None:
        """End the plan where it stands (its `finally` blocks run; it may yield no more)."""
        self._plan.close()

    @property
    def result(self) -> T:
        if not self.done:
            raise RuntimeError("the call's result is known once it has run to its end")
        return self._result  # type: ignore[return-value]


def closing(handle: object, plan: Plan[T]) -> Plan[T]:
    """`plan`, then `handle` closed, whether the plan returned or raised. (If the whole call
    is abandoned, the plan may yield nothing more: its shell closes the handle then.)"""
    try:
        result = yield from plan
    except Exception:
        yield Close(handle)
        raise
    yield Close(handle)
    return result


def shell_signature(step: Callable[..., Plan[Any]]) -> inspect.Signature:
    """The signature a shell's method made of the plan `step` shows: the plan's parameters,
    without its return annotation (a plan is what it returns, not what the method does)."""
    return inspect.signature(step).replace(return_annotation=inspect.Signature.empty)


class Shell(Protocol[IO_co, S_co]):
    """A shell over plans (`Client`, `AsyncSandbox`, ...): its I/O, which performs them, and
    the object whose methods are the plans of its calls."""

    @property
    def _io(self) -> IO_co: ...

    @property
    def _steps(self) -> S_co: ...
