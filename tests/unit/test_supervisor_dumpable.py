"""Every mode of the supervisor, and its keeper, is not dumpable: a process of the guest's
uid cannot open its stdout or stderr through /proc to forge frames or flood the caller.

Each mode is caught alive at its first write to stdout, into a pipe the test filled
beforehand, so the write blocks until the test lets it go. Then the kernel's view is read
(a process that is not dumpable has its /proc/<pid> owned by root) and the attack is made,
as the guest's user: open /proc/<pid>/fd/1 and fd/2 for writing. That it is the first act
of every mode, before anything else, is held by the order of the source itself.
"""

from __future__ import annotations

import ast
import contextlib
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from openblox.guest import supervisor
from tests.unit.guest_runner import Guest, guest_state
from tests.unit.test_supervisor import GCC_FLAGS, NATIVE_SOURCE

SOURCE = Path(supervisor.__file__)
SLEEPER = ("--", "sh", "-c", "echo up; exec sleep 100")


@pytest.fixture
def guest() -> Iterator[Guest]:
    with guest_state() as state:
        yield state


def full_pipe() -> tuple[int, int]:
    """A pipe with not one byte of room left: the first write to it blocks."""
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    for size in (4096, 1):
        try:
            while True:
                os.write(write_end, b"x" * size)
        except BlockingIOError:
            pass
    os.set_blocking(write_end, True)
    return read_end, write_end


def owner_of(pid: int) -> int:
    return Path(f"/proc/{pid}/fd").stat().st_uid


def assert_closed_to_the_guest(guest: Guest, pid: int) -> None:
    uid = os.getuid() if guest.user is None else guest.user
    assert uid != 0, "the guest's user must not be root for the check to mean anything"
    deadline = time.monotonic() + 15
    while owner_of(pid) != 0:
        assert time.monotonic() < deadline, f"pid {pid} stayed dumpable"
        time.sleep(0.02)
    for fd in (1, 2):
        opened = guest.sh(f"( exec 3>/proc/{pid}/fd/{fd} ) 2>/dev/null && echo opened || echo no")
        assert opened == "no", f"the guest's user opened /proc/{pid}/fd/{fd}"


@contextlib.contextmanager
def caught_at_first_write(guest: Guest, argv: list[str]) -> Iterator[int]:
    """Argv's pid, while it is blocked at its first write to stdout (a full pipe); let go,
    and waited for, on leaving."""
    read_end, write_end = full_pipe()
    process = guest.popen(argv, stdout=write_end)
    os.close(write_end)
    try:
        yield process.pid
    finally:
        os.close(read_end)  # its write fails (EPIPE), and it ends
        process.wait(timeout=30)


@pytest.fixture(scope="module")
def native_binary() -> Iterator[Path]:
    if subprocess.run(["which", "gcc"], capture_output=True, check=False).returncode:
        pytest.skip("gcc is not installed yet (cluster/cluster.sh install adds it)")
    with guest_state() as state:  # a directory the guest's user may enter
        binary = state.root / "supervise"
        subprocess.run(["gcc", *GCC_FLAGS, "-o", str(binary), str(NATIVE_SOURCE)], check=True)
        binary.chmod(0o755)
        yield binary


def test_the_python_run_mode_is_closed_to_the_guest(guest: Guest) -> None:
    argv = guest.argv("run", "10", "100", "0", "", "--", "true")
    with caught_at_first_write(guest, argv) as pid:  # its first write: the verdict
        assert_closed_to_the_guest(guest, pid)


def test_the_native_run_mode_is_closed_to_the_guest(guest: Guest, native_binary: Path) -> None:
    argv = [str(native_binary), "run", "10", "100", "0", "", "--", "true"]
    with caught_at_first_write(guest, argv) as pid:  # its first write: "started"
        assert_closed_to_the_guest(guest, pid)


@pytest.mark.parametrize(
    "mode",
    [("ps",), ("logs", "web", "stdout", "100"), ("stop", "web", "0"), ("start", "web")],
    ids=lambda mode: mode[0],
)
def test_every_control_mode_is_closed_to_the_guest(guest: Guest, mode: tuple[str, ...]) -> None:
    if mode[0] == "start":
        argv = guest.argv("start", "web", "0", "", "1000", *SLEEPER)
    else:
        guest.start("web", *SLEEPER)
        deadline = time.monotonic() + 10
        while not (guest.state / "web" / "stdout").read_bytes():
            assert time.monotonic() < deadline
            time.sleep(0.02)
        argv = guest.argv(*mode)
    with caught_at_first_write(guest, argv) as pid:
        assert_closed_to_the_guest(guest, pid)


def test_the_keeper_is_closed_to_the_guest(guest: Guest) -> None:
    """The keeper outlives the exec that started it: it inherits not being dumpable from
    `start` (a fork keeps it), and keeps it, while its command, after execve, does not."""
    guest.start("web", *SLEEPER)
    keeper = guest.keepers[-1]
    assert_closed_to_the_guest(guest, keeper)
    (command,) = supervisor.descendants(keeper)
    user = os.getuid() if guest.user is None else guest.user
    deadline = time.monotonic() + 10  # until its execve, it is the keeper's fork
    while owner_of(command) != user:
        assert time.monotonic() < deadline, "the command never became dumpable again"
        time.sleep(0.02)


def test_not_dumpable_is_the_first_act_of_the_python_supervisor() -> None:
    """Before anything else it runs: the only statements ahead of it are the docstring, the
    `__future__` import and `import ctypes`, which it needs."""
    tree = ast.parse(SOURCE.read_text())
    first = [ast.unparse(node) for node in tree.body[:5]]
    assert first[1:] == [
        "from __future__ import annotations",
        "import ctypes",
        "PR_SET_DUMPABLE = 4",
        "if __name__ == '__main__':\n"
        "    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)",
    ]


def test_not_dumpable_is_the_first_act_of_the_native_supervisor() -> None:
    main = NATIVE_SOURCE.read_text().split("int main(int argc, char **argv) {", 1)[1]
    statements = re.sub(r"/\*.*?\*/", "", main, flags=re.DOTALL).split(";")
    assert statements[0].split() == ["prctl(PR_SET_DUMPABLE,", "0,", "0,", "0,", "0)"]
