"""Other projects' Go programs that a benchmark runs beside openblox (agent-sandbox's
controller, kwok): built from the Go module proxy when the bench needs them, never
committed, and run as processes of their own that only the bench signals.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

CACHE_ROOT = Path(os.environ.get("OPENBLOX_CACHE", "/var/cache/openblox"))
BUILD_TIMEOUT = 1800


def _go_env() -> dict[str, str]:
    return {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-buildvcs=false"}


def build_module_binary(
    module: str,
    version: str,
    package: str,
    cache: Path,
    *,
    keep: Sequence[str] = (),
    log: IO[str] | None = None,
) -> Path:
    """`cache/<package's last element>`, built once per version: `go mod download` gives
    the module's tree, which is built in a copy of its own (its go.mod pins what it needs;
    `go install pkg@version` refuses a module with replace directives). `keep` names
    folders of the module's tree that are copied to `cache` beside the binary."""
    binary = cache / package.rstrip("/").rsplit("/", 1)[-1]
    if (cache / ".done").exists() and binary.exists() and all((cache / k).exists() for k in keep):
        return binary
    shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="go-tool-") as work:
        found = subprocess.run(
            ["go", "mod", "download", "-json", f"{module}@{version}"],
            cwd=work,
            env=_go_env(),
            capture_output=True,
            check=True,
            timeout=BUILD_TIMEOUT,
        )
        tree = Path(work) / "src"
        shutil.copytree(Path(json.loads(found.stdout)["Dir"]), tree)
        for path in [tree, *tree.rglob("*")]:
            path.chmod(path.stat().st_mode | 0o200)  # the module cache is read-only
        subprocess.run(
            ["go", "build", "-trimpath", "-ldflags", "-s -w", "-o", str(binary), package],
            cwd=tree,
            env=_go_env(),
            stdout=log,
            stderr=subprocess.STDOUT if log else None,
            check=True,
            timeout=BUILD_TIMEOUT,
        )
        for folder in keep:
            shutil.copytree(tree / folder, cache / folder)
    (cache / ".done").write_text(f"{module}@{version}\n")
    return binary


class BackgroundProcess:
    """One program in a session of its own, its output in a log file and its pid in a
    file, so that an interrupted run's leftover can be found and stopped (`stop_leftover`)."""

    def __init__(self, binary: Path, log_path: Path, pid_file: Path) -> None:
        self.binary = binary
        self.log_path = log_path
        self.pid_file = pid_file
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def start(
        self,
        arguments: Sequence[str],
        environment: dict[str, str],
        ready: Callable[[], bool],
        *,
        what: str,
        timeout: float = 60,
    ) -> None:
        """Starts it and waits until `ready()`; raises with its last output if it exits
        or is not ready in time."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [str(self.binary), *arguments],
                env=environment,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        self.pid_file.write_text(str(self.process.pid))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{what} exited ({self.process.returncode}): {self.tail()}")
            with contextlib.suppress(OSError):
                if ready():
                    return
            time.sleep(0.5)
        raise RuntimeError(f"{what} was not ready in {timeout:.0f} s: {self.tail()}")

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def tail(self, size: int = 600) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_bytes()[-size:].decode(errors="replace")
        return ""

    def stop(self) -> None:
        if self.process is None:
            return
        stop_group(self.process.pid, self.process)
        self.process = None
        self.pid_file.unlink(missing_ok=True)


def stop_group(pid: int, process: subprocess.Popen[bytes] | None = None) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if process is not None:
            if process.poll() is not None:
                return
        elif not Path(f"/proc/{pid}").exists():
            return
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    if process is not None:
        process.wait(timeout=10)


def stop_leftover(pid_file: Path, binary: Path, what: str, notes: list[str]) -> None:
    """A process an interrupted run left running (by its pid file, if it is that binary)."""
    try:
        pid = int(pid_file.read_text())
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
    except (OSError, ValueError):
        pid_file.unlink(missing_ok=True)
        return
    if command == str(binary):
        stop_group(pid)
        notes.append(f"stopped a leftover {what} (pid {pid})")
    pid_file.unlink(missing_ok=True)
