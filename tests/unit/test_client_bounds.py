"""Every path from the guest back to the caller is bounded on the client's side too.

The supervisor caps what it sends, but it shares a uid with the guest, so the client never
relies on that: a stream that brings more than the call accepts is stopped and closed at
the bound, with a typed error, whatever the sandbox keeps sending. Here the sandbox is a
fake exec socket whose frames never end: a call that returns at all has stopped reading.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import NoReturn

import pytest

from openblox.agent_tools.shaping import process_info
from openblox.client import AsyncClient, Client, background, cluster
from openblox.client.effects import Plan
from openblox.client.errors import (
    ExecTransportError,
    FileOperationError,
    OutputLimitExceeded,
    ProcessRecordDamaged,
)
from openblox.client.files import listing_of
from openblox.client.processes import ANSWER_BYTES, LOG_BYTES, process_of, processes_of
from openblox.client.results import ExecResult
from openblox.client.supervised import SUPERVISOR_STDERR_BYTES, SupervisedRun, read_supervised
from openblox.denials import ExecOutcome
from openblox.transport import ERROR, STDERR, STDOUT, ExecOutputTooLarge, Frame
from openblox.transport.frames import STATUS_BYTES, ExecOutput
from tests.unit.client_fakes import Script, both, run
from tests.unit.test_transport_exec import FakeAsyncSocket, FakeSocket

Shell = type[Client] | type[AsyncClient]
CHUNK = 64 * 1024


class Endless:
    """Frames of one channel, forever; counts how many were taken."""

    def __init__(self, channel: int, data: bytes = b"x" * CHUNK) -> None:
        self.frame = Frame(channel, data)
        self.taken = 0

    def __iter__(self) -> Iterator[Frame]:
        for _ in itertools.count():
            self.taken += 1
            yield self.frame


def _socket(
    shell: Shell, frames: Iterable[Frame], then: Exception | None = None
) -> FakeSocket | FakeAsyncSocket:
    """The exec stream of `shell`'s kind that replays `frames` (then raises `then`)."""
    return FakeSocket(frames, then) if shell is Client else FakeAsyncSocket(frames, then)


def _control(shell: Shell, socket: object, args: list[str], answer: int = ANSWER_BYTES) -> bytes:
    script = Script()
    script.execs = [socket]
    return run(shell, script, background.control("ns", "pod", args, answer=answer))


def test_exec_output_stops_a_channel_past_its_limit_and_bounds_what_it_keeps() -> None:
    output = ExecOutput(limit_stdout=10, limit_stderr=3)
    output.feed(Frame(STDOUT, b"x" * 10))
    with pytest.raises(ExecOutputTooLarge, match="stdout went past 10 bytes") as raised:
        output.feed(Frame(STDOUT, b"y"))
    assert (raised.value.channel, raised.value.limit) == ("stdout", 10)
    with pytest.raises(ExecOutputTooLarge, match="stderr"):
        output.feed(Frame(STDERR, b"four"))
    with pytest.raises(ExecOutputTooLarge, match="status"):
        ExecOutput().feed(Frame(ERROR, b" " * (STATUS_BYTES + 1)))
    # A reader that names no bound still keeps a bounded amount of each channel.
    unnamed = ExecOutput()
    for _ in range(40):
        unnamed.feed(Frame(STDOUT, b"z" * CHUNK))
    assert len(unnamed.stdout) == 1 << 20 and unnamed.truncated


def test_read_to_end_stops_at_the_bound_and_closes_however_long_the_guest_sends() -> None:
    endless = Endless(STDOUT)
    socket = FakeSocket(endless)
    with pytest.raises(ExecOutputTooLarge):
        socket.read_to_end(0.0, ExecOutput.bounded(stdout=1 << 20, stderr=1024))
    assert socket.closed
    assert endless.taken == (1 << 20) // CHUNK + 1


@both
def test_the_clients_read_to_end_keeps_what_came_before_a_break_and_closes(shell: Shell) -> None:
    frames = [Frame(STDOUT, b"out"), Frame(STDERR, b"err"), Frame(ERROR, b'{"status": "Success"}')]
    whole = ExecOutput()
    socket = _socket(shell, frames)
    run(shell, Script(), cluster.read_to_end(socket, 0.0, whole))
    assert (bytes(whole.stdout), bytes(whole.stderr), whole.exit_code) == (b"out", b"err", 0)
    assert socket.closed
    broken = _socket(shell, frames[:1], then=TimeoutError())
    partial = ExecOutput()
    with pytest.raises(TimeoutError):
        run(shell, Script(), cluster.read_to_end(broken, 0.0, partial))
    assert (bytes(partial.stdout), partial.exit_code) == (b"out", None)
    assert broken.closed


@both
def test_the_clients_read_to_end_stops_at_the_bound_and_closes(shell: Shell) -> None:
    endless = Endless(STDERR)
    socket = _socket(shell, endless)
    output = ExecOutput.bounded(stdout=10, stderr=CHUNK)
    with pytest.raises(ExecOutputTooLarge):
        run(shell, Script(), cluster.read_to_end(socket, 0.0, output))
    assert socket.closed and endless.taken == 2


@both
@pytest.mark.parametrize("channel", [STDOUT, STDERR])
def test_a_flooded_control_answer_is_a_typed_error_at_its_bound(shell: Shell, channel: int) -> None:
    """The attack seen: `ps` answered 64 MiB and more against a cap of 1 MiB."""
    endless = Endless(channel)
    socket = _socket(shell, endless)
    with pytest.raises(OutputLimitExceeded, match="the answer to ps's") as raised:
        _control(shell, socket, ["ps"])
    assert socket.closed
    bound = ANSWER_BYTES if channel == STDOUT else SUPERVISOR_STDERR_BYTES
    assert raised.value.limit == bound
    assert endless.taken <= bound // CHUNK + 1


@both
def test_logs_accept_no_more_than_they_asked_for_nor_than_the_sandbox_keeps(shell: Shell) -> None:
    args, answer = background.logs_arguments("web", "stdout", 10 * LOG_BYTES)
    assert (args, answer) == (["logs", "web", "stdout", str(LOG_BYTES)], LOG_BYTES)
    args, answer = background.logs_arguments("web", "stderr", 100)
    socket = _socket(shell, [Frame(STDOUT, b"x" * 101)])
    with pytest.raises(OutputLimitExceeded, match="past 100 bytes"):
        _control(shell, socket, args, answer=answer)


@both
def test_a_record_the_sandbox_damaged_is_its_own_error(shell: Shell) -> None:
    exit_5 = (
        b'{"status": "Failure", "details": {"causes": [{"reason": "ExitCode", "message": "5"}]}}'
    )
    said = b"the state of web in the sandbox is damaged, so it was refused: stdout is a link\n"
    socket = _socket(shell, [Frame(STDERR, said), Frame(ERROR, exit_5)])
    with pytest.raises(ProcessRecordDamaged, match="stdout is a link"):
        _control(shell, socket, ["logs", "web", "stdout", "9"])


def _result(outcome: ExecOutcome, duration: float) -> Plan[ExecResult]:
    yield from ()
    return ExecResult(outcome.stdout, outcome.stderr, outcome.exit_code, False, False, duration)


def _broken(status: bytes, stderr: bytearray, since: datetime) -> Plan[NoReturn]:
    yield from ()
    raise AssertionError("a bounded stream is not a broken one")


def _framed(tag: bytes, payload: bytes) -> bytes:
    return tag + len(payload).to_bytes(4, "big") + payload


@pytest.mark.parametrize(
    ("frames", "error"),
    [
        # The supervisor's own stderr, flooded through /proc by something in the sandbox.
        (Endless(STDERR), OutputLimitExceeded),
        # Output frames past the cap the supervisor would never send.
        (Endless(STDOUT, _framed(b"O", b"x" * 1000)), OutputLimitExceeded),
        # Empty frames, which would never reach the cap.
        (Endless(STDOUT, _framed(b"O", b"")), ExecTransportError),
    ],
    ids=["stderr", "past-the-cap", "empty-frames"],
)
@both
def test_a_supervised_exec_stops_reading_at_its_bound(
    shell: Shell, frames: Endless, error: type
) -> None:
    frames.taken = 0  # the same frames serve each shell's run
    started = datetime.now(UTC)
    socket = _socket(shell, frames)
    supervised = SupervisedRun(timeout=10.0, cap=4096, argv=("x",), cwd=None, started_at=started)
    plan = read_supervised(supervised, socket, stdin=None, make_result=_result, on_broken=_broken)
    with pytest.raises(error):
        run(shell, Script(), plan)
    assert socket.closed
    assert frames.taken <= SUPERVISOR_STDERR_BYTES // CHUNK + 6


def test_the_answers_about_processes_are_checked_not_trusted() -> None:
    good = {"name": "web", "running": True, "argv": ["sh"], "pid": 7}
    listed = processes_of((json.dumps(good) + "\n" + json.dumps({"omitted": 3}) + "\n").encode())
    assert [p.name for p in listed] == ["web"] and listed.omitted == 3
    assert listed.notes() == [
        "3 more entries in the sandbox's process state were left out (not a command openblox "
        "started, or past the answer's bound)"
    ]
    damaged = processes_of(json.dumps(dict(good, unreadable="meta is a symbolic link")).encode())
    assert damaged.notes() == ["web: meta is a symbolic link"]
    assert process_info(damaged[0].to_dict()).unreadable == "meta is a symbolic link"
    assert process_of(json.dumps(dict(good, started=True)).encode(), "start").started
    for bad in (
        dict(good, name="x" * 64),
        dict(good, name="../up"),
        dict(good, keeper=1),  # a field the supervisor never sends
        dict(good, pid=1),
        dict(good, argv="sh -c evil"),
        dict(good, running="yes"),
        {"running": True},
        "[" * 100_000,  # deep nesting: a RecursionError in json, never an escape from here
    ):
        line = bad if isinstance(bad, str) else json.dumps(bad)
        with pytest.raises(ExecTransportError, match="the answer to ps is malformed"):
            processes_of(line.encode())
    with pytest.raises(ExecTransportError, match="the answer to stop is malformed"):
        process_of(b"", "stop")
    with pytest.raises(ExecTransportError, match="the answer to start is malformed"):
        process_of((json.dumps(good) + "\n" + json.dumps(good)).encode(), "start")


def test_a_listing_cut_at_the_cap_or_malformed_is_refused_with_its_path() -> None:
    entry = json.dumps({"name": "a", "type": "file", "size": 1, "mode": "0o644"})
    whole = ExecResult(f"{entry}\n".encode(), b"", 0, False, False, 0.1)
    assert listing_of(whole, "/w") == [json.loads(entry)]
    cut = ExecResult(entry[:10].encode(), b"", 0, False, True, 0.1)
    with pytest.raises(FileOperationError, match="/w: the listing is longer than the output cap"):
        listing_of(cut, "/w")
    nested = ExecResult(b"[" * 100_000, b"", 0, False, False, 0.1)
    with pytest.raises(FileOperationError, match="/w: the listing is malformed"):
        listing_of(nested, "/w")
