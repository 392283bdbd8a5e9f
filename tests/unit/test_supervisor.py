"""The in-sandbox supervisor, run on this host's kernel: framing, limits, tree kill, filter.

gVisor-specific behaviour (the filter and RLIMIT_NPROC inside the Sentry) is proved on
the cluster by the conformance suite (IDN-008, RES-002); these pin the supervisor's own
logic, fast and without a cluster.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from openblox.client.launch import SUPERVISOR_ARGV
from openblox.client.supervised import STALL_SECONDS
from openblox.guest import supervisor

PYTHON = sys.executable
NATIVE_SOURCE = Path(supervisor.__file__).with_name("supervise.c")
# The one suite runs against both implementations of `run`.
IMPLEMENTATIONS = ["python", "native"]
# As cluster/images/sandbox/image.sh builds it, plus -Werror.
GCC_FLAGS = ("-O2", "-static", "-Wall", "-Wextra", "-Werror")


@pytest.fixture(scope="session")
def native_supervisor(tmp_path_factory: pytest.TempPathFactory) -> str:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed yet (cluster/cluster.sh install adds it)")
    binary = tmp_path_factory.mktemp("native") / "supervise"
    subprocess.run(
        ["gcc", *GCC_FLAGS, "-o", str(binary), str(NATIVE_SOURCE)],
        check=True,
    )
    return str(binary)


@pytest.fixture(params=IMPLEMENTATIONS)
def prefix(request: pytest.FixtureRequest) -> list[str]:
    if request.param == "native":
        return [request.getfixturevalue("native_supervisor")]
    return [PYTHON, *SUPERVISOR_ARGV[1:]]


def run(
    prefix: list[str],
    argv: list[str],
    *,
    timeout: float = 10,
    cap: int = 1 << 20,
    env: tuple[str, ...] = (),
    cwd: str = "",
    nproc: int = 0,
) -> tuple[bytes, bytes, dict[str, object]]:
    command = [
        *prefix,
        "run",
        str(timeout),
        str(cap),
        str(nproc),
        cwd,
        *env,
        "--",
        *argv,
    ]
    # A session of its own: a supervisor that let `kill 0` through must not hit pytest.
    raw = subprocess.run(
        command, capture_output=True, timeout=timeout + 20, check=False, start_new_session=True
    ).stdout
    stdout, stderr, verdict = parse(raw)
    # A supervisor left to run reports no stall the client would act on.
    stalled = verdict.pop("stalled")
    assert isinstance(stalled, float) and 0 <= stalled < STALL_SECONDS
    return stdout, stderr, verdict


def parse(raw: bytes) -> tuple[bytes, bytes, dict[str, object]]:
    """The supervisor's frames: the command's stdout and stderr, and the verdict."""
    stdout, stderr, verdict = b"", b"", None
    while raw:
        tag, length = raw[:1], int.from_bytes(raw[1:5], "big")
        payload, raw = raw[5 : 5 + length], raw[5 + length :]
        if tag == b"O":
            stdout += payload
        elif tag == b"E":
            stderr += payload
        elif tag == b"R":
            verdict = json.loads(payload)
        else:
            assert (tag, payload) == (b"S", b""), "only the native one says it started"
    assert isinstance(verdict, dict), "the supervisor always ends with its verdict"
    return stdout, stderr, verdict


def test_output_exit_code_env_and_cwd_come_back_exactly(prefix: list[str], tmp_path: Path) -> None:
    script = (
        "import os,sys; "
        "sys.stdout.buffer.write(b'\\x00\\xff' + os.environ['K'].encode() + os.getcwd().encode()); "
        "sys.stderr.write('e'); sys.exit(3)"
    )
    stdout, stderr, verdict = run(
        prefix, [PYTHON, "-c", script], env=("K=v a=l",), cwd=str(tmp_path)
    )
    assert stdout == b"\x00\xffv a=l" + str(tmp_path).encode()
    assert stderr == b"e"
    assert verdict == {"exit_code": 3, "timed_out": False, "truncated": False, "signal": None}


def test_a_missing_program_is_127_with_the_reason(prefix: list[str]) -> None:
    _, stderr, verdict = run(prefix, ["/nonexistent/prog"])
    assert verdict["exit_code"] == 127
    assert b"No such file" in stderr


def test_a_kill_is_told_apart_from_exit_137(prefix: list[str]) -> None:
    assert run(prefix, ["sh", "-c", "exit 137"])[2]["signal"] is None
    verdict = run(prefix, ["sh", "-c", "kill -9 $$"])[2]
    assert verdict == {"exit_code": 137, "timed_out": False, "truncated": False, "signal": 9}


def test_the_verdict_says_how_long_the_supervisor_went_unscheduled(prefix: list[str]) -> None:
    """The client tells gVisor's kill after a stall from the command's own exit by this:
    a supervisor stopped for 6 s (as a frozen node stops it) reports about 6 s."""
    command = [*prefix, "run", "30", str(1 << 20), "0", "", "--", "sleep", "2"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, start_new_session=True)
    try:
        time.sleep(0.5)
        os.kill(process.pid, signal.SIGSTOP)
        time.sleep(6)
        os.kill(process.pid, signal.SIGCONT)
        raw, _ = process.communicate(timeout=30)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    verdict = parse(raw)[2]
    assert verdict["exit_code"] == 0
    assert isinstance(verdict["stalled"], float) and 5.5 <= verdict["stalled"] < 30


def test_timeout_kills_the_whole_tree_including_setsid_and_double_forks(
    prefix: list[str], tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    script = (
        f"sleep 1000 & echo $! >> {pids}; "
        f"setsid sh -c 'sleep 1000 & echo $! >> {pids}; wait' & "
        f"(sleep 1000 & echo $! >> {pids}) ; wait"
    )
    started = time.monotonic()
    _, _, verdict = run(prefix, ["sh", "-c", script], timeout=1.5)
    assert verdict["timed_out"] is True and verdict["exit_code"] == 137
    assert time.monotonic() - started < 10
    left = [int(p) for p in pids.read_text().split()]
    assert len(left) == 3
    for pid in left:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_output_past_the_cap_is_cut_and_the_command_is_not_left_blocked(prefix: list[str]) -> None:
    stdout, _, verdict = run(
        prefix, ["sh", "-c", "head -c 50000000 /dev/zero; echo done >&2"], cap=1000
    )
    assert len(stdout) == 1000
    assert verdict["truncated"] is True and verdict["exit_code"] == 0


def test_new_namespaces_are_refused_and_threads_still_start(prefix: list[str]) -> None:
    script = """
import ctypes, os, threading
libc = ctypes.CDLL(None, use_errno=True)
out = []
for flag in (0x10000000, 0x20000, 0x40000000, 0x20000000):
    out.append((libc.unshare(flag), ctypes.get_errno()))
out.append((libc.syscall(435, 0, 0), ctypes.get_errno()))  # clone3
t = threading.Thread(target=lambda: out.append("thread")); t.start(); t.join()
pid = os.fork()
if pid == 0:
    os._exit(0)
out.append(os.waitpid(pid, 0)[1])
print(out)
"""
    stdout, _, verdict = run(prefix, [PYTHON, "-c", script])
    assert verdict["exit_code"] == 0, stdout
    assert (
        stdout.strip().splitlines()[-1]
        == b"[(-1, 1), (-1, 1), (-1, 1), (-1, 1), (-1, 38), 'thread', 0]"
    )


def test_no_new_privileges_and_the_filter_are_in_place(prefix: list[str]) -> None:
    stdout, _, _ = run(prefix, ["grep", "-E", "^(NoNewPrivs|Seccomp):", "/proc/self/status"])
    assert stdout.split() == [b"NoNewPrivs:", b"1", b"Seccomp:", b"2"]


@pytest.mark.parametrize("table", [supervisor._X86_64, supervisor._AARCH64])
def test_every_jump_of_the_filter_lands_inside_it(table: supervisor.Table) -> None:
    program = supervisor.seccomp_program(table)
    assert len(program) < 256
    for index, (code, jt, jf, _) in enumerate(program):
        if code in (supervisor.JEQ, supervisor.JGE, supervisor.JSET):
            assert index + 1 + max(jt, jf) < len(program)
    assert program[-1][0] == supervisor.RET


def _status_field(text: bytes, field: str) -> str:
    for line in text.decode().splitlines():
        if line.startswith(f"{field}:"):
            return line.split(":", 1)[1].strip()
    raise AssertionError(f"{field} not in /proc/self/status")


def test_the_command_starts_with_sigpipe_and_sigxfsz_at_their_defaults(prefix: list[str]) -> None:
    stdout, _, _ = run(prefix, ["cat", "/proc/self/status"])
    ignored = int(_status_field(stdout, "SigIgn"), 16)
    assert not ignored & (1 << (13 - 1)), "SIGPIPE is ignored in the command"
    assert not ignored & (1 << (25 - 1)), "SIGXFSZ is ignored in the command"
    # So a pipeline's writer ends on SIGPIPE, as under a shell, instead of spinning.
    _, _, verdict = run(prefix, ["sh", "-c", "yes | head -c1 >/dev/null; echo done"], timeout=5)
    assert verdict["timed_out"] is False


def test_kill_0_in_the_command_does_not_reach_the_supervisor(prefix: list[str]) -> None:
    _, _, verdict = run(prefix, ["sh", "-c", "kill -TERM 0; sleep 5"])
    assert verdict == {"exit_code": 143, "timed_out": False, "truncated": False, "signal": 15}


def test_the_process_cap_is_a_hard_rlimit_of_the_command(prefix: list[str]) -> None:
    stdout, _, _ = run(prefix, ["cat", "/proc/self/limits"], nproc=77)
    line = next(row for row in stdout.decode().splitlines() if row.startswith("Max processes"))
    assert line.split()[2:4] == ["77", "77"]


def test_the_command_tree_ends_when_the_caller_stops_reading(
    prefix: list[str], tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    script = f"echo $$ > {pids}; sleep 100 & echo $! >> {pids}; while :; do echo xxxxxxxx; done"
    command = [*prefix, "run", "60", str(1 << 30), "0", "", "--", "sh", "-c", script]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, start_new_session=True)
    assert process.stdout is not None
    survivors = []
    try:
        process.stdout.read(4096)
        process.stdout.close()
        assert process.wait(timeout=15) == 120
        for pid in (int(line) for line in pids.read_text().split()):
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except FileNotFoundError:
                continue
            if state != "Z":
                survivors.append(pid)
    finally:
        # A supervisor that fails this test must not leave a busy loop on the machine.
        for pid in (int(line) for line in pids.read_text().split()) if pids.exists() else ():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
    assert not survivors, f"{survivors} outlived their supervisor's caller"


def test_only_a_stall_that_ended_just_before_the_verdict_counts() -> None:
    """gVisor's kill follows the stall at once: a stall long before the command's end says
    nothing of how it ended, and a short pause is scheduling noise."""
    stall = supervisor.Stall()
    stall.note(end=100.0, over=40.0)
    stall.note(end=150.0, over=0.5)
    assert stall.recent(moment=125.0) == 40.0
    assert stall.recent(moment=131.0) == 0.0
    stall.note(end=160.0, over=6.0)
    assert stall.recent(moment=161.0) == 6.0
    for end in range(1000):
        stall.note(end=float(end), over=2.0)
    assert len(stall.stalls) == supervisor.Stall.KEPT
