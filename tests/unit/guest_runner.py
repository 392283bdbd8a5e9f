"""Runs the exec supervisor's modes on this host as the sandbox would: as a user who is not
root (as the guest is not), against a state directory of the test's own.

The supervisor's state directory is a constant (`STATE_DIR`), as the sandbox's is; the
source sent to the interpreter here names a temporary one instead. Run as root, the modes
run as `nobody`, under an interpreter that user can execute, so that what the kernel lets
a same-uid process do (open another's /proc/<pid>/fd, signal it) is what the guest could.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from openblox.guest import SUPERVISOR, source, supervisor

STATE_LINE = 'STATE_DIR = "/run/openblox/processes"'
NOBODY = 65534
# An interpreter `nobody` can execute (the test's own may sit under root's home).
SYSTEM_PYTHON = "/usr/bin/python3"


class Guest:
    """A state directory, and the user the supervisor's modes (and the guest) run as."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.state = root / "processes"
        self.user: int | None = NOBODY if os.geteuid() == 0 else None
        self.python = SYSTEM_PYTHON if self.user is not None else sys.executable
        text = source(SUPERVISOR)
        assert text.count(STATE_LINE) == 1, "the supervisor's STATE_DIR line moved"
        self.source = text.replace(STATE_LINE, f'STATE_DIR = "{self.state}"')
        self.keepers: list[int] = []

    def argv(self, *args: str) -> list[str]:
        return [self.python, "-I", "-S", "-c", self.source, *args]

    def run(self, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            self.argv(*args),
            capture_output=True,
            timeout=timeout,
            check=False,
            user=self.user,
            start_new_session=True,
        )

    def popen(self, argv: list[str], stdout: int | None = None) -> subprocess.Popen[bytes]:
        return subprocess.Popen(argv, stdout=stdout, user=self.user, start_new_session=True)

    def sh(self, script: str) -> str:
        """A shell command, run as the guest's code would run: as its user."""
        done = subprocess.run(
            ["sh", "-c", script], capture_output=True, timeout=30, check=False, user=self.user
        )
        return done.stdout.decode().strip()

    def own(self, *paths: Path) -> None:
        """Give what the test planted to the guest's user, as if the guest had made it."""
        if self.user is not None:
            for path in paths:
                os.lchown(path, self.user, self.user)

    def start(self, name: str, *argv: str) -> dict[str, object]:
        """Start `name` (the test's own keeper, remembered to be ended after the test)."""
        (answer,) = self.answer("start", name, "0", "", str(1 << 20), *argv)
        # Read now, before the test tampers with the record: a pid the test trusts.
        meta = json.loads((self.state / name / "meta").read_text())
        self.keepers.append(int(meta["keeper"]))
        return answer

    def answer(self, *args: str) -> list[dict[str, object]]:
        """A mode's JSON lines; it must have succeeded."""
        done = self.run(*args)
        assert done.returncode == 0, done.stderr
        return [json.loads(line) for line in done.stdout.splitlines()]


@contextlib.contextmanager
def guest_state() -> Iterator[Guest]:
    if os.geteuid() == 0 and not Path(SYSTEM_PYTHON).exists():
        pytest.skip(f"run as root, the supervisor needs {SYSTEM_PYTHON} to run as nobody")
    # Not under pytest's tmp_path: only root may enter that.
    root = Path(tempfile.mkdtemp(prefix="openblox-guest-"))
    root.chmod(0o755)
    guest = Guest(root)
    guest.state.mkdir()
    guest.own(guest.state)
    try:
        yield guest
    finally:
        _end_keepers(guest)
        shutil.rmtree(root, ignore_errors=True)


def _end_keepers(guest: Guest) -> None:
    """No keeper a test started outlives it. Only pids the test read from its own keepers'
    records before any tampering are signalled, and only while they still run this
    supervisor (a record the test forged may name any pid, even 1)."""
    for meta in guest.state.glob("*/meta"):
        if not meta.parent.is_symlink():
            guest.run("stop", meta.parent.name, "0")
    for keeper in guest.keepers:
        try:
            ours = str(guest.state).encode() in Path(f"/proc/{keeper}/cmdline").read_bytes()
        except OSError:
            continue
        if ours:
            for pid in [*supervisor.descendants(keeper), keeper]:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
