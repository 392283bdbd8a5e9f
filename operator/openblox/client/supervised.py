"""One command under the in-sandbox supervisor: its framed output, live or collected.

`read_supervised` is the one reader of a supervised exec, a plan (`effects`) that both
clients drive; `_FrameDecoder` checks the supervisor's frames against the call's cap."""

from __future__ import annotations

import json
import math
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NoReturn

from openblox.client.effects import Emit, Frames, Next, Plan, SendStdin, closing
from openblox.client.errors import (
    ExecTransportError,
    OutputLimitExceeded,
    SandboxStalled,
    stream_error,
)
from openblox.client.results import ExecResult
from openblox.denials import ExecOutcome
from openblox.transport.errors import ExecStreamError
from openblox.transport.frames import ExecOutput

# What to make of an outcome (classify its denials), given the seconds it took.
ResultMaker = Callable[[ExecOutcome, float], Plan[ExecResult]]
# Called when the stream ended without a verdict (the final Status, the stderr, when the
# exec began); it finds out why and raises.
BrokenHandler = Callable[[bytes, bytearray, datetime], Plan[NoReturn]]

# How long past the command's own timeout the supervisor may take to report.
EXEC_GRACE_SECONDS = 10.0
# gVisor's systrap platform ends a process whose stub leaves an interrupt unanswered for
# 5 s (its contextCheckupTimeout) after the process's context has waited 30 s
# (stuckContextTimeout): by SIGKILL, or by SIGSEGV on a fault it can no longer serve. A
# supervisor that went unscheduled this long saw the stall that caused it.
STALL_SECONDS = 5.0
_STALL_SIGNALS = frozenset({signal.SIGKILL, signal.SIGSEGV})
# The supervisor's own stderr, outside its frames: a traceback at most (the command's
# stderr travels framed, on stdout). More than this is refused, and the read stops.
SUPERVISOR_STDERR_BYTES = 64 * 1024


@dataclass(frozen=True)
class OutputChunk:
    """Bytes the command wrote, in the order they reached the supervisor."""

    stream: str  # "stdout" or "stderr"
    data: bytes


@dataclass
class SupervisedRun:
    """One command under the supervisor, as far as it has been read: the call's limits,
    the decoder of the supervisor's frames, and the outcome they add up to. A streaming
    run hands its output to the caller as it comes, and keeps only a tail of it."""

    timeout: float
    cap: int
    argv: tuple[str, ...]
    cwd: str | None
    started_at: datetime
    streaming: bool = False
    started: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.decoder = _FrameDecoder(self.cap, keep=not self.streaming)

    def deadline(self) -> float:
        return self.started + self.timeout + EXEC_GRACE_SECONDS

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def timed_out(self) -> ExecOutcome:
        """The client's own deadline passed: the supervisor never reported."""
        return self._outcome(137, timed_out=True, truncated=False, signal=None)

    def verdict_outcome(self, verdict: dict[str, Any]) -> ExecOutcome:
        return self._outcome(
            int(verdict["exit_code"]),
            timed_out=bool(verdict["timed_out"]),
            truncated=bool(verdict["truncated"]),
            # 0: the command exited; None: a supervisor too old to say.
            signal=int(verdict["signal"] or 0) if "signal" in verdict else None,
        )

    def _outcome(
        self, exit_code: int, *, timed_out: bool, truncated: bool, signal: int | None
    ) -> ExecOutcome:
        return ExecOutcome(
            bytes(self.decoder.stdout),
            bytes(self.decoder.stderr),
            exit_code,
            timed_out,
            truncated,
            self.timeout,
            self.cap,
            signal,
            self.argv,
            self.cwd,
        )


# Marks, in a streaming call's output, that the exec is open and its stdin on its way: the
# shell's `stream` returns there, and the caller reads on.
STARTED = object()


def read_supervised(
    run: SupervisedRun,
    socket: object,
    *,
    stdin: bytes | None,
    make_result: ResultMaker,
    on_broken: BrokenHandler,
    fallback: Callable[[], Plan[object]] | None = None,
) -> Plan[ExecResult]:
    """Reads one supervised exec to its verdict, emitting its output on the way when the
    run streams. If the native supervisor turned out to be missing (`fallback` given), the
    command never started: it runs once more through `fallback`'s stream."""
    if stdin is not None:
        yield SendStdin(socket, stdin)
    if run.streaming:
        yield Emit(STARTED)
    while True:
        output = supervised_output()
        try:
            yield from closing(socket, _decode(run, socket, output))
        except TimeoutError:
            return (yield from make_result(run.timed_out(), run.elapsed()))
        except ExecStreamError as error:
            raise stream_error(error, "the exec") from error
        verdict = run.decoder.verdict
        if verdict is not None:
            outcome = run.verdict_outcome(verdict)
            if stalled := stall_kill(outcome, verdict):
                raise stalled
            return (yield from make_result(outcome, run.elapsed()))
        if fallback and _supervisor_missing(output.status, run.decoder):
            socket, fallback = (yield from fallback()), None
            run.decoder = _FrameDecoder(run.cap, keep=not run.streaming)
            if stdin is not None:
                yield SendStdin(socket, stdin)
            continue
        return (yield from on_broken(output.status, output.stderr, run.started_at))


def stall_kill(outcome: ExecOutcome, verdict: dict[str, Any]) -> SandboxStalled | None:
    """The error for a command gVisor most likely ended after a stall (the node frozen or
    starved of CPU), or None. Its exit is then not the command's own: no result, and no
    denial inferred from the signal (a SIGKILL would otherwise read as the memory limit)."""
    stalled = float(verdict.get("stalled") or 0)
    if outcome.timed_out or outcome.signal not in _STALL_SIGNALS or stalled < STALL_SECONDS:
        return None
    return SandboxStalled(
        outcome.exit_code, int(outcome.signal), stalled, outcome.stdout, outcome.stderr
    )


def _decode(run: SupervisedRun, socket: object, output: ExecOutput) -> Plan[None]:
    frames = yield Frames(socket, run.deadline())
    while (frame := (yield Next(frames))) is not None:
        if stdout := output.feed(frame):
            for chunk in run.decoder.feed(stdout):
                if run.streaming:
                    yield Emit(chunk)


def supervised_output() -> ExecOutput:
    """The accumulator of a supervised exec. Stdout carries the supervisor's frames, which
    the decoder takes as they come (not kept twice, and bounded by the cap); stderr is what
    the exec said outside them, kept for the post-mortem and bounded."""
    return ExecOutput(
        keep_stdout=0,
        keep_stderr=SUPERVISOR_STDERR_BYTES,
        limit_stderr=SUPERVISOR_STDERR_BYTES,
    )


def _supervisor_missing(status: bytes, decoder: _FrameDecoder) -> bool:
    """Whether the exec failed before anything ran because the supervisor was not there
    (or not executable): the runtime says so in the exec's final Status."""
    # The native supervisor frames "started" before anything else: once any byte came,
    # it ran, and running the command again under the Python one could run it twice.
    if decoder.raw_bytes or not status:
        return False
    try:
        message = str(json.loads(status).get("message") or "")
    except ValueError:
        return False
    return "/usr/libexec/openblox/supervise" in message and any(
        reason in message
        for reason in ("no such file or directory", "permission denied", "not found")
    )


# What a streamed command keeps of its own output, for classifying denials (the
# runtime's messages, such as "Resource temporarily unavailable", end up at the end).
_STREAM_TAIL = 64 * 1024


# Stdout, stderr, the verdict, and the native supervisor's "started".
_TAGS = (b"O", b"E", b"R", b"S")
# The supervisors read 64 KiB at a time; a verdict is a few dozen bytes.
_MAX_FRAME = 1 << 20
_MAX_VERDICT = 4096


def _well_formed(tag: bytes, length: int, frames: int, ended: bool) -> bool:
    """Whether a frame is one the supervisor sends: a known tag; nothing after the verdict;
    "started" first and empty; output never empty, so the cap bounds the frames too."""
    if tag not in _TAGS or ended:
        return False
    if tag == b"S":
        return frames == 0 and length == 0
    if tag == b"R":
        return length <= _MAX_VERDICT
    return 0 < length <= _MAX_FRAME


def _verdict(payload: bytes) -> dict[str, Any]:
    """The verdict, with every field the client reads checked (one with only an exit code
    used to pass here and then fail with a KeyError)."""
    try:
        verdict = json.loads(payload)
    except (ValueError, RecursionError):
        verdict = None
    if not (
        isinstance(verdict, dict)
        and _is_int(verdict.get("exit_code"))
        and isinstance(verdict.get("timed_out"), bool)
        and isinstance(verdict.get("truncated"), bool)
        and (verdict.get("signal") is None or _is_int(verdict["signal"]))
        and _seconds(verdict.get("stalled", 0))
    ):
        raise ExecTransportError("the exec supervisor's verdict is malformed")
    return verdict


def _seconds(value: object) -> bool:
    """A duration the supervisor may report: a finite number, not negative."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    )


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class _FrameDecoder:
    """Splits the supervisor's framed stdout into the command's stdout, stderr and verdict.

    The cap is enforced here as well as in the sandbox: the supervisor shares a uid with
    the code it runs, so its framing is a convenience, not a boundary. The supervisor cuts
    the output at the cap, so output past it was written into the stream by something
    else: the decoder raises OutputLimitExceeded there, and the reader stops and closes.
    With every frame checked (`_well_formed`), what is read is bounded by the cap too.
    """

    def __init__(self, cap: int, keep: bool = True) -> None:
        self._buffer = bytearray()
        self._cap = cap
        self._frames = 0
        self.raw_bytes = 0
        self.received = 0
        self.keep = keep
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.verdict: dict[str, Any] | None = None

    def feed(self, data: bytes) -> Iterator[OutputChunk]:
        self.raw_bytes += len(data)
        self._buffer += data
        while len(self._buffer) >= 5:
            tag, length = bytes(self._buffer[0:1]), int.from_bytes(self._buffer[1:5], "big")
            if not _well_formed(tag, length, self._frames, self.verdict is not None):
                # Not the supervisor's framing: never guess at what the bytes meant.
                raise ExecTransportError(f"the exec supervisor's output is malformed ({tag!r})")
            if len(self._buffer) < 5 + length:
                return
            payload = bytes(self._buffer[5 : 5 + length])
            del self._buffer[: 5 + length]
            self._frames += 1
            if tag == b"S":
                continue
            if tag == b"R":
                self.verdict = _verdict(payload)
                continue
            if len(payload) > self._cap - self.received:
                raise OutputLimitExceeded("the command's output", self._cap)
            self.received += len(payload)
            target = self.stdout if tag == b"O" else self.stderr
            target += payload
            if not self.keep:
                del target[:-_STREAM_TAIL]
            yield OutputChunk("stdout" if tag == b"O" else "stderr", payload)
