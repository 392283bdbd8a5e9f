"""Typed errors a caller can branch on; each says what happened in words a person reads."""

from __future__ import annotations

from openblox.denials import Denial
from openblox.transport import ExecOutputTooLarge, ExecStreamError


class OpenbloxClientError(Exception):
    """Base of every error the client raises."""


class SandboxNotReady(OpenbloxClientError):
    """The Sandbox reported a condition it will not recover from by waiting."""

    def __init__(self, name: str, reason: str, message: str) -> None:
        super().__init__(f"sandbox {name} is not ready: {reason}: {message}")
        self.name = name
        self.reason = reason
        self.detail = message


class SandboxTimeout(OpenbloxClientError):
    def __init__(self, name: str, seconds: float, reason: str | None) -> None:
        super().__init__(
            f"sandbox {name} was not ready after {seconds:.0f}s"
            + (f" (last reason: {reason})" if reason else "")
        )
        self.name = name
        self.reason = reason


class SandboxGone(OpenbloxClientError):
    """The Sandbox or its pod no longer exists (deleted, or reaped at its lifetime).

    When a policy ended it (the pod was OOM-killed during an exec), `record` is that
    denial, in the shape of docs/denials.md; otherwise None.
    """

    def __init__(self, message: str, record: Denial | None = None) -> None:
        super().__init__(message)
        self.record = record


class AdmissionDenied(OpenbloxClientError):
    """The API server refused the Sandbox (an unknown or disallowed profile, a bad field)."""

    def __init__(self, message: str, record: Denial) -> None:
        super().__init__(message)
        self.record = record


class ExecTransportError(OpenbloxClientError):
    """The exec stream could not be opened or broke; the command's result is unknown."""

    def __init__(self, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class SandboxStalled(OpenbloxClientError):
    """The command ended by SIGKILL or SIGSEGV while the sandbox had stalled (its node was
    frozen, or starved of CPU, for seconds on end). gVisor's systrap platform ends a process
    whose stub stops answering for that long, so the exit is most likely gVisor's, not the
    command's own; and the command may have run in part. `stalled` is how long the exec
    supervisor went unscheduled, in seconds; `exit_code` and `signal` are as it saw them,
    `stdout` and `stderr` what the command wrote before it ended (docs/reliability.md)."""

    def __init__(
        self, exit_code: int, signal: int, stalled: float, stdout: bytes, stderr: bytes
    ) -> None:
        super().__init__(
            f"the command ended by signal {signal} (exit {exit_code}) after the sandbox had "
            f"stalled for {stalled:.1f} s: its node was frozen or starved of CPU, and gVisor "
            "ends a process it finds stuck that long, so the exit is most likely gVisor's, "
            "not the command's own (it may have run in part)"
        )
        self.exit_code = exit_code
        self.signal = signal
        self.stalled = stalled
        self.stdout = stdout
        self.stderr = stderr


class OutputLimitExceeded(ExecTransportError):
    """More came back from the sandbox than the call accepts: past the exec's output cap, or
    past the bound of an answer (`processes`, `logs`, ...). The client stopped reading there
    and closed the stream, so its memory and time stay bounded. The supervisor never sends
    that much; code in the sandbox writing into the stream around it does, so what the
    command did is unknown. `limit` is the bound in bytes."""

    def __init__(self, what: str, limit: int) -> None:
        super().__init__(
            f"{what} went past {limit} bytes, so the client stopped reading and closed the "
            "stream (the supervisor never sends that much: code in the sandbox wrote into it)"
        )
        self.limit = limit


class ProcessRecordDamaged(OpenbloxClientError):
    """What the sandbox holds for a background command is not what its keeper wrote: a
    link, a file that is not a regular file, or one past its size bound. Code in the
    sandbox changed it (it can write there); nothing there was followed or read past its
    bound, and the message says what was found."""


class FileOperationError(OpenbloxClientError):
    """A file operation inside the sandbox failed; the message names the path and why."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path


class InvalidArgument(OpenbloxClientError, ValueError):
    """A call's argument is out of range (a timeout above the profile's, say)."""


class ProcessNotFound(OpenbloxClientError, LookupError):
    """No background command by that name was ever started in this sandbox (or its pod
    was replaced since, which loses them)."""


def stream_error(error: ExecStreamError, what: str) -> ExecTransportError:
    """The client's error for an exec stream that broke, or that carried more than its
    reader accepts (`what` names the stream: "the exec", "the answer to ps")."""
    if isinstance(error, ExecOutputTooLarge):
        return OutputLimitExceeded(f"{what}'s {error.channel}", error.limit)
    return ExecTransportError(str(error), error.status_code)


def denial_of(error: BaseException) -> Denial | None:
    """The denial record an error carries (`SandboxGone`, `AdmissionDenied`), or None."""
    return error.record if isinstance(error, SandboxGone | AdmissionDenied) else None
