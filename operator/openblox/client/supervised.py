"""One command under the in-sandbox supervisor: its framed output, live or collected."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NoReturn

from openblox.client.errors import ExecTransportError, OutputLimitExceeded, stream_error
from openblox.client.results import ExecResult
from openblox.denials import ExecOutcome
from openblox.transport import ExecOutput, ExecSocket, ExecStreamError

# What to make of an outcome (classify its denials), given the seconds it took.
ResultMaker = Callable[[ExecOutcome, float], ExecResult]
# Called when the stream ended without a verdict (the final Status, the stderr, when the
# exec began); it finds out why and raises.
BrokenHandler = Callable[[bytes, bytearray, datetime], NoReturn]

# How long past the command's own timeout the supervisor may take to report.
EXEC_GRACE_SECONDS = 10.0
# The supervisor's own stderr, outside its frames: a traceback at most (the command's
# stderr travels framed, on stdout). More than this is refused, and the read stops.
SUPERVISOR_STDERR_BYTES = 64 * 1024


@dataclass(frozen=True)
class OutputChunk:
    """Bytes the command wrote, in the order they reached the supervisor."""

    stream: str  # "stdout" or "stderr"
    data: bytes


class _RunParts:
    """What a supervised run is, sync or asyncio: the call's limits, the decoder of the
    supervisor's frames, and the outcome they add up to."""

    def __init__(
        self,
        *,
        timeout: float,
        cap: int,
        argv: tuple[str, ...],
        cwd: str | None,
        started_at: datetime,
    ) -> None:
        self._timeout = timeout
        self._cap = cap
        self._argv = argv
        self._cwd = cwd
        self._started_at = started_at
        self._started = time.monotonic()
        self._decoder = _FrameDecoder(cap)
        self._result: ExecResult | None = None

    @property
    def result(self) -> ExecResult:
        if self._result is None:
            raise RuntimeError("the command's result is known once its output has been read")
        return self._result

    def _deadline(self) -> float:
        return self._started + self._timeout + EXEC_GRACE_SECONDS

    def _timed_out(self) -> ExecOutcome:
        """The client's own deadline passed: the supervisor never reported."""
        return self._outcome(137, timed_out=True, truncated=False, signal=None)

    def _verdict_outcome(self, verdict: dict[str, Any]) -> ExecOutcome:
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
            bytes(self._decoder.stdout),
            bytes(self._decoder.stderr),
            exit_code,
            timed_out,
            truncated,
            self._timeout,
            self._cap,
            signal,
            self._argv,
            self._cwd,
        )


class _SupervisedRun(_RunParts):
    """Reads one supervised exec to its verdict; `chunks()` yields output on the way."""

    def __init__(
        self,
        socket: ExecSocket,
        *,
        make_result: ResultMaker,
        on_broken: BrokenHandler,
        stdin: bytes | None,
        timeout: float,
        cap: int,
        argv: tuple[str, ...],
        cwd: str | None,
        started_at: datetime,
        fallback: Callable[[], ExecSocket] | None = None,
    ) -> None:
        super().__init__(timeout=timeout, cap=cap, argv=argv, cwd=cwd, started_at=started_at)
        self._make_result = make_result
        self._on_broken = on_broken
        self._socket = socket
        self._stdin = stdin
        self._fallback = fallback
        self._send_stdin()

    def _send_stdin(self) -> None:
        if self._stdin is not None:
            threading.Thread(
                target=_send_all, args=(self._socket, self._stdin), daemon=True
            ).start()

    def collect(self) -> ExecResult:
        for _ in self.chunks():
            pass
        return self.result

    def chunks(self, keep: bool = True) -> Iterator[OutputChunk]:
        self._decoder.keep = keep
        while True:
            output = supervised_output()
            try:
                for frame in self._socket.frames(self._deadline()):
                    if stdout := output.feed(frame):
                        yield from self._decoder.feed(stdout)
            except TimeoutError:
                self._finish(self._timed_out())
                return
            except ExecStreamError as error:
                raise stream_error(error, "the exec") from error
            finally:
                self._socket.close()
            verdict = self._decoder.verdict
            if (
                verdict is None
                and self._fallback
                and _supervisor_missing(output.status, self._decoder)
            ):
                self._socket, self._fallback = self._fallback(), None
                self._decoder = _FrameDecoder(self._cap, keep=keep)
                self._send_stdin()
                continue
            if verdict is None:
                self._on_broken(output.status, output.stderr, self._started_at)
            break
        self._finish(self._verdict_outcome(verdict))

    def _finish(self, outcome: ExecOutcome) -> None:
        self._result = self._make_result(outcome, time.monotonic() - self._started)


class ExecStream:
    """Output of a running command as it arrives; see `Sandbox.stream`."""

    def __init__(self, run: _SupervisedRun) -> None:
        self._run = run

    def __iter__(self) -> Iterator[OutputChunk]:
        # Chunks go to the caller, not into memory: only the tail the denial classifier
        # needs is kept.
        return self._run.chunks(keep=False)

    def __enter__(self) -> ExecStream:
        return self

    def __exit__(self, *_: object) -> None:
        self._run._socket.close()

    @property
    def result(self) -> ExecResult:
        return self._run.result


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


def _send_all(socket: ExecSocket, data: bytes) -> None:
    try:
        socket.send_stdin(data)
        socket.close_stdin()
    except Exception:  # the reader reports the broken stream; nothing to add here
        pass


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
    ):
        raise ExecTransportError("the exec supervisor's verdict is malformed")
    return verdict


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
