"""Named background commands: the supervisor's `start`, `ps`, `stop` and `logs` modes.

These modes start no guest code themselves (or, for `start`, confine what they start under
the same filter and process cap as exec), so they run directly, not under `run`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping, Sequence

from openblox.client.arguments import (
    checked_argv,
    checked_byte_count,
    checked_cwd,
    checked_grace,
    env_pairs,
)
from openblox.client.cluster import open_exec, read_to_end
from openblox.client.effects import Plan
from openblox.client.errors import (
    ExecTransportError,
    InvalidArgument,
    OpenbloxClientError,
    ProcessNotFound,
    ProcessRecordDamaged,
    stream_error,
)
from openblox.client.launch import SUPERVISOR_ARGV
from openblox.client.processes import ANSWER_BYTES, LOG_BYTES, check_process_name
from openblox.client.supervised import SUPERVISOR_STDERR_BYTES
from openblox.transport.errors import ExecStreamError
from openblox.transport.frames import ExecOutput

# The supervisor's exit codes for "no process by that name", and for a record in the
# sandbox that is not what its keeper wrote (supervisor.py's copies are held equal to
# these by tests/unit/test_names.py).
NO_SUCH_PROCESS = 3
DAMAGED = 5


def start_arguments(
    name: str,
    argv: Sequence[str],
    process_cap: int,
    *,
    env: Mapping[str, str] | None,
    cwd: str | None,
) -> list[str]:
    """The `start` mode's arguments, every one checked."""
    check_process_name(name)
    return [
        "start",
        name,
        str(process_cap),
        checked_cwd(cwd),
        str(LOG_BYTES),
        *env_pairs(env),
        "--",
        *checked_argv(argv),
    ]


def stop_arguments(name: str, grace: float) -> tuple[list[str], float]:
    """The `stop` mode's arguments, every one checked, and how long it may take to answer."""
    check_process_name(name)
    seconds = checked_grace(grace)
    return ["stop", name, repr(seconds)], seconds + 30


def logs_arguments(name: str, stream: str, limit: int) -> tuple[list[str], int]:
    """The `logs` mode's arguments, every one checked, and the most bytes its answer may
    hold: `limit`, or LOG_BYTES if that is less (the sandbox keeps no more)."""
    check_process_name(name)
    if stream not in ("stdout", "stderr"):
        raise InvalidArgument(f"stream must be 'stdout' or 'stderr', not {stream!r:.80}")
    count = min(checked_byte_count("limit", limit), LOG_BYTES)
    return ["logs", name, stream, str(count)], count


def control(
    namespace: str,
    pod: str,
    args: Sequence[str],
    timeout: float = 30.0,
    *,
    answer: int = ANSWER_BYTES,
) -> Plan[bytes]:
    """Run one of the supervisor's own modes in the pod and return its stdout, which may be
    at most `answer` bytes: past that the client stops reading (OutputLimitExceeded)."""
    socket = yield from open_exec(
        namespace, pod, [*SUPERVISOR_ARGV, *args], stdin=False, timeout=timeout
    )
    output = control_accumulator(answer)
    with control_errors(args[0], timeout):
        yield from read_to_end(socket, time.monotonic() + timeout, output)
    return control_output(args[0], output)


def control_accumulator(answer: int) -> ExecOutput:
    """What a control mode's stream is read into: its answer whole, up to `answer` bytes,
    and the supervisor's own complaint on stderr, bounded as in a supervised exec."""
    return ExecOutput.bounded(stdout=answer, stderr=SUPERVISOR_STDERR_BYTES)


@contextlib.contextmanager
def control_errors(operation: str, timeout: float) -> Iterator[None]:
    """A control mode's stream that ran out of time or broke, as the client's error."""
    try:
        yield
    except TimeoutError as error:
        raise ExecTransportError(f"{operation} did not answer within {timeout:.0f}s") from error
    except ExecStreamError as error:
        raise stream_error(error, f"the answer to {operation}") from error


def control_output(operation: str, output: ExecOutput) -> bytes:
    """A control mode's stdout, or the error its exit code means."""
    failure = control_failure(operation, output.exit_code, output.stderr)
    if failure is not None:
        raise failure
    return bytes(output.stdout)


def control_failure(
    operation: str, code: int | None, stderr: bytes | bytearray
) -> OpenbloxClientError | None:
    """The error a control mode's exit code means (None: it succeeded)."""
    if code == 0:
        return None
    message = stderr.decode("utf-8", "replace").strip()
    if code == NO_SUCH_PROCESS:
        return ProcessNotFound(message)
    if code == DAMAGED:
        return ProcessRecordDamaged(message[-500:])
    return ExecTransportError(f"{operation} failed (exit {code}): {message[-500:]}")
