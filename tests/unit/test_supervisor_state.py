"""The supervisor's background modes against a state directory the guest has tampered with.

The guest can write the state directory (/run/openblox/processes): it may plant links,
FIFOs, huge or malformed records, and records naming pids it chose. Nothing there may be
followed or trusted: each attack below is what the guest can do, and each must end in a
bounded answer or a clear refusal (exit DAMAGED), never a read through a link, a hang, an
unbounded answer or a signal to a process the guest named.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Iterator

import pytest

from openblox.client.background import DAMAGED
from openblox.client.processes import ANSWER_BYTES, processes_of
from openblox.guest import supervisor
from tests.unit.guest_runner import Guest, guest_state

SLEEPER = ("--", "sh", "-c", "echo up; exec sleep 100")


@pytest.fixture
def guest() -> Iterator[Guest]:
    with guest_state() as state:
        yield state


def start(guest: Guest, name: str, *argv: str) -> dict[str, object]:
    return guest.start(name, *(argv or SLEEPER))


def wait_for(what: str, probe: Callable[[], object], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout}s"
        time.sleep(0.05)


def test_start_ps_logs_and_stop_round_trip(guest: Guest) -> None:
    started = start(guest, "web")
    assert started["started"] is True and started["running"] is True
    wait_for("the command's output", lambda: guest.run("logs", "web", "stdout", "100").stdout)
    assert guest.run("logs", "web", "stdout", "100").stdout == b"up\n"
    (listed,) = guest.answer("ps")
    assert (listed["name"], listed["running"], listed["argv"]) == ("web", True, list(SLEEPER[1:]))
    assert "keeper" not in listed  # a pid nobody needs is not passed on
    (stopped,) = guest.answer("stop", "web", "0.5")
    assert (stopped["running"], stopped["stopped"], stopped["signal"]) == (False, True, 15)
    assert "unreadable" not in stopped


def test_a_link_in_place_of_a_log_is_refused_not_read(guest: Guest) -> None:
    start(guest, "web")
    log = guest.state / "web" / "stdout"
    log.unlink()
    log.symlink_to("/dev/zero")  # read through, the old `logs` never ended
    started = time.monotonic()
    done = guest.run("logs", "web", "stdout", str(1 << 20), timeout=20)
    assert time.monotonic() - started < 10
    assert done.returncode == DAMAGED and done.stdout == b""
    assert b"stdout is a symbolic link" in done.stderr


def test_a_fifo_in_place_of_a_log_is_refused_without_hanging(guest: Guest) -> None:
    directory = guest.state / "web"
    directory.mkdir()
    os.mkfifo(directory / "stdout")
    guest.own(directory, directory / "stdout")
    done = guest.run("logs", "web", "stdout", "100", timeout=20)
    assert done.returncode == DAMAGED
    assert b"stdout is not a regular file" in done.stderr


def test_the_keeper_never_writes_through_a_link_planted_under_its_log(guest: Guest) -> None:
    start(guest, "chatty", "--", "sh", "-c", "while :; do echo tick; sleep 0.02; done")
    log = guest.state / "chatty" / "stdout"
    wait_for("the first tick", log.read_bytes)
    victim = guest.root / "victim"
    victim.write_bytes(b"")
    guest.own(victim)
    log.unlink()
    log.symlink_to(victim)
    time.sleep(0.5)  # some 25 ticks, each written by the keeper through its own descriptor
    assert victim.read_bytes() == b""


@pytest.mark.parametrize("replaced", ["state", "process"])
def test_a_directory_replaced_by_a_link_is_never_followed(guest: Guest, replaced: str) -> None:
    elsewhere = guest.root / "elsewhere"
    (elsewhere / "web").mkdir(parents=True)
    (elsewhere / "web" / "stdout").write_bytes(b"read through a link\n")
    (elsewhere / "web" / "meta").write_text(json.dumps({"argv": ["planted"]}))
    (elsewhere / "stdout").write_bytes(b"read through a link\n")
    if replaced == "state":
        guest.state.rmdir()
        guest.state.symlink_to(elsewhere)
    else:
        (guest.state / "web").symlink_to(elsewhere)
    for args in (("logs", "web", "stdout", "100"), ("stop", "web", "0")):
        done = guest.run(*args)
        assert done.returncode == DAMAGED, (args, done.stderr)
        assert b"web is a symbolic link" in done.stderr or b"processes is a" in done.stderr
        assert b"read through" not in done.stdout
    ps = guest.run("ps")
    if replaced == "state":
        assert ps.returncode == DAMAGED and ps.stdout == b""
    else:
        assert ps.stdout == b'{"omitted": 1}\n'  # the link is no command's directory
    started = guest.run("start", "web", "0", "", "100", *SLEEPER)
    assert started.returncode == DAMAGED, started.stderr
    assert not (elsewhere / "web" / "lock").exists() and not (elsewhere / "lock").exists()


def test_a_64_mib_record_costs_a_bounded_answer_that_names_the_damage(guest: Guest) -> None:
    directory = guest.state / "big"
    directory.mkdir()
    meta = directory / "meta"
    with meta.open("wb") as handle:
        handle.truncate(64 << 20)  # sparse: 64 MiB to read, nothing on disk
    guest.own(directory, meta)
    done = guest.run("ps", timeout=20)
    assert done.returncode == 0
    assert len(done.stdout) < 1024
    (record,) = (json.loads(line) for line in done.stdout.splitlines())
    assert record == {
        "name": "big",
        "running": False,
        "unreadable": f"meta is larger than {supervisor.RECORD_BYTES} bytes",
    }


def test_forged_fields_are_dropped_and_named_never_passed_on(guest: Guest) -> None:
    directory = guest.state / "forged"
    directory.mkdir()
    meta = {
        "name": "x" * 10_000,
        "running": True,
        "argv": "sh -c evil",
        "pid": -1,
        "keeper": 1,
        "startedAt": "y" * 1000,
        "extra": {"nested": True},
    }
    ended = {"running": True, "exitCode": "0", "signal": 999, "stopped": "yes", "endedAt": None}
    (directory / "meta").write_text(json.dumps(meta))
    (directory / "exit").write_text(json.dumps(ended))
    guest.own(directory, directory / "meta", directory / "exit")
    (record,) = guest.answer("ps")
    assert set(record) == {"name", "running", "unreadable"}
    assert (record["name"], record["running"]) == ("forged", False)
    for field in ("argv", "pid", "startedAt", "exitCode", "signal", "stopped", "endedAt"):
        assert f"{field} is not valid" in str(record["unreadable"])
    # The client reads the supervisor's answer as it is: the record, and why it is partial.
    (process,) = processes_of(json.dumps(record).encode())
    assert process.name == "forged" and process.argv == () and process.unreadable


def test_a_deeply_nested_record_is_unreadable_not_a_crash(guest: Guest) -> None:
    directory = guest.state / "deep"
    directory.mkdir()
    (directory / "meta").write_text("[" * 50_000)
    guest.own(directory, directory / "meta")
    (record,) = guest.answer("ps")
    assert record["unreadable"] == "meta is not a JSON object"


def test_ps_stays_within_its_answer_bound_and_counts_what_it_left_out(guest: Guest) -> None:
    argv = ["x" * (60 * 1024)]
    for index in range(30):
        directory = guest.state / f"p{index:02}"
        directory.mkdir()
        (directory / "meta").write_text(json.dumps({"argv": argv}))
        guest.own(directory, directory / "meta")
    for junk in ("UPPER", "a..b", ".hidden"):
        (guest.state / junk).mkdir()
    (guest.state / "a-file").write_text("not a directory")
    done = guest.run("ps")
    assert done.returncode == 0
    assert len(done.stdout) <= ANSWER_BYTES
    listed = processes_of(done.stdout)
    assert 0 < len(listed) < 30
    assert listed.omitted == 30 - len(listed) + 4
    assert [p.name for p in listed] == [f"p{index:02}" for index in range(len(listed))]


def test_ps_looks_at_a_bounded_number_of_entries(guest: Guest) -> None:
    for index in range(supervisor.MAX_ENTRIES + 50):
        (guest.state / f"n{index}").mkdir()
    listed = processes_of(guest.run("ps", timeout=60).stdout)
    assert len(listed) == supervisor.MAX_ENTRIES
    assert listed.omitted >= 1


def test_stop_never_signals_a_pid_a_record_names(guest: Guest) -> None:
    """The guest holds the lock itself, so the record reads as running, and names a victim
    as its keeper: the old stop sent that pid SIGTERM, then SIGKILL to it and its tree."""
    victim = guest.popen(["sleep", "60"])
    directory = guest.state / "trap"
    directory.mkdir()
    (directory / "meta").write_text(json.dumps({"keeper": victim.pid, "pid": victim.pid}))
    (directory / "lock").write_bytes(b"")
    guest.own(directory, directory / "meta", directory / "lock")
    holder = guest.popen(["flock", "-x", str(directory / "lock"), "sleep", "60"])
    try:
        wait_for("the guest to hold the lock", lambda: guest.answer("ps")[0]["running"])
        done = guest.run("stop", "trap", "0.2")
        assert done.returncode == supervisor.NOT_STOPPED
        assert b"its keeper did not answer" in done.stderr
        assert victim.poll() is None, "stop signalled the pid the guest's record named"
    finally:
        for process in (victim, holder):
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def test_a_stop_request_planted_before_a_start_does_not_end_it(guest: Guest) -> None:
    directory = guest.state / "web"
    directory.mkdir()
    (directory / "stop").write_text("0")
    guest.own(directory, directory / "stop")
    start(guest, "web")
    time.sleep(0.5)  # the keeper looks for a request every 0.1 s
    assert guest.answer("ps")[0]["running"] is True


def test_the_guest_may_stop_its_own_command_through_the_request(guest: Guest) -> None:
    start(guest, "web")
    (guest.state / "web" / "stop").symlink_to("/dev/zero")  # asks; its content is not read
    wait_for("the keeper to stop", lambda: not guest.answer("ps")[0]["running"])
    (record,) = guest.answer("ps")
    assert record["stopped"] is True


@pytest.mark.parametrize("name", ["../escape", "Upper", "a/b", "", "x" * 64, "-lead"])
def test_the_modes_refuse_what_is_no_process_name(guest: Guest, name: str) -> None:
    for args in (("logs", name, "stdout", "10"), ("stop", name, "0")):
        assert guest.run(*args).returncode == 2
    assert guest.run("start", name, "0", "", "10", *SLEEPER).returncode == 2


@pytest.mark.parametrize(
    "name", ["a", "web", "a.b-c_d", "0", "x" * 63, "a..b", ".a", "a.", "_a", "a_", "UP", "a b"]
)
def test_the_supervisors_name_rule_is_the_clients(name: str) -> None:
    from openblox.client.processes import valid_process_name

    assert supervisor.valid_name(name) == valid_process_name(name)


def test_nothing_is_created_through_a_link_to_a_place_the_guest_cannot_write(
    guest: Guest,
) -> None:
    """A start through a planted link would create files wherever the link points."""
    target = guest.root / "target"
    target.mkdir()
    (guest.state / "web").symlink_to(target)
    done = guest.run("start", "web", "0", "", "100", *SLEEPER)
    assert done.returncode == DAMAGED
    assert list(target.iterdir()) == []
