"""kubernetes-sigs/agent-sandbox's controller as a baseline: built from the Go module
proxy when the bench runs (its code is never committed here), its CRDs installed, and
its controller run out of cluster with the admin's kubeconfig; all of it removed again.

Out of cluster, not as a pod: its published image cannot be pulled on this machine, and
a process on the node talks to the same API server over the same loopback as the
embedded cluster's own controllers, so it pays no network hop that an in-cluster pod
would not also pay on a one-node cluster. Its CPU is read from /proc like the operator's.
Flags are its defaults except `--extensions` (the warm pool and claim controllers),
`--leader-elect=false` (out of cluster it would need a namespace for its Lease; one
replica needs no election) and loopback-only metrics and probe ports.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import IO

from bench import env
from bench.agent_sandbox_objects import CRDS

MODULE = "sigs.k8s.io/agent-sandbox"
VERSION = "v1.0.1"
PACKAGE = "./cmd/agent-sandbox-controller"
CACHE = Path("/var/cache/openblox") / f"agent-sandbox-{VERSION}"
BINARY = CACHE / "agent-sandbox-controller"
CRD_DIR = CACHE / "crds"
METRICS_ADDRESS = ("127.0.0.1", 18080)
PROBE_ADDRESS = ("127.0.0.1", 18081)
PID_FILE = env.BENCH_RUN / "agent-sandbox-controller.pid"
LOG_DIR = env.BENCH_STATE / "agent-sandbox"
BUILD_TIMEOUT = 1800


def _go_env() -> dict[str, str]:
    return {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-buildvcs=false"}


def build(log: IO[str] | None = None) -> Path:
    """The controller's binary, built once per version (cached like cluster/build.sh's
    go_install builds): `go mod download` gives the module's tree, which is built in a
    copy of its own (its go.mod pins what it needs; `go install pkg@version` refuses a
    module with replace directives)."""
    if (CACHE / ".done").exists() and BINARY.exists():
        return BINARY
    shutil.rmtree(CACHE, ignore_errors=True)
    CACHE.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="agent-sandbox-") as work:
        found = subprocess.run(
            ["go", "mod", "download", "-json", f"{MODULE}@{VERSION}"],
            cwd=work,
            env=_go_env(),
            capture_output=True,
            check=True,
            timeout=BUILD_TIMEOUT,
        )
        source = Path(json.loads(found.stdout)["Dir"])
        tree = Path(work) / "src"
        shutil.copytree(source, tree)
        for path in [tree, *tree.rglob("*")]:
            path.chmod(path.stat().st_mode | 0o200)  # the module cache is read-only
        subprocess.run(
            ["go", "build", "-trimpath", "-ldflags", "-s -w", "-o", str(BINARY), PACKAGE],
            cwd=tree,
            env=_go_env(),
            stdout=log,
            stderr=subprocess.STDOUT if log else None,
            check=True,
            timeout=BUILD_TIMEOUT,
        )
        shutil.copytree(tree / "k8s" / "crds", CRD_DIR)
    (CACHE / ".done").write_text(f"{MODULE}@{VERSION}\n")
    return BINARY


def install_crds() -> None:
    env.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_DIR), timeout=120)
    env.kubectl(
        "wait", "--for", "condition=Established", "--timeout=60s", *(f"crd/{c}" for c in CRDS)
    )


def remove_crds() -> None:
    """Deletes its CRDs, and with them every object of theirs still there."""
    env.kubectl(
        "delete", "crd", "--ignore-not-found", "--wait=true", "--timeout=180s", *CRDS, timeout=200
    )
    # kubectl's discovery cache still maps the plural `sandboxes` to agents.x-k8s.io for
    # hours: a later `kubectl get sandboxes` then asks for a kind that is gone. Fetching
    # discovery again writes the cache anew.
    env.kubectl("api-resources", "--cached=false", "-o", "name", timeout=60)


def _port_free(address: tuple[str, int]) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(address) != 0


class Controller:
    """The controller process, in a session of its own so that only it is signalled."""

    def __init__(self, binary: Path, run_id: str) -> None:
        self.binary = binary
        self.log_path = LOG_DIR / f"controller-{run_id}.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def start(self, timeout: float = 60) -> None:
        for address in (METRICS_ADDRESS, PROBE_ADDRESS):
            if not _port_free(address):
                raise RuntimeError(f"{address[0]}:{address[1]} is taken: another controller?")
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [
                    str(self.binary),
                    "--extensions",
                    "--leader-elect=false",
                    f"--metrics-bind-address={METRICS_ADDRESS[0]}:{METRICS_ADDRESS[1]}",
                    f"--health-probe-bind-address={PROBE_ADDRESS[0]}:{PROBE_ADDRESS[1]}",
                ],
                env={**os.environ, "KUBECONFIG": env.KUBECONFIG},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        PID_FILE.parent.mkdir(parents=True, exist_ok=True)
        PID_FILE.write_text(str(self.process.pid))
        url = f"http://{PROBE_ADDRESS[0]}:{PROBE_ADDRESS[1]}/readyz"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"the controller exited ({self.process.returncode}): {self.tail()}"
                )
            with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as answer:
                if answer.status == 200:
                    return
            time.sleep(0.5)
        raise RuntimeError(f"the controller was not ready in {timeout:.0f} s: {self.tail()}")

    def tail(self, size: int = 600) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_bytes()[-size:].decode(errors="replace")
        return ""

    def stop(self) -> None:
        if self.process is None:
            return
        _stop_group(self.process.pid, self.process)
        self.process = None
        PID_FILE.unlink(missing_ok=True)


def _stop_group(pid: int, process: subprocess.Popen[bytes] | None = None) -> None:
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


def stop_leftover(notes: list[str]) -> None:
    """A controller an interrupted run left running (by its pid file, if it is ours)."""
    try:
        pid = int(PID_FILE.read_text())
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
    except (OSError, ValueError):
        PID_FILE.unlink(missing_ok=True)
        return
    if command == str(BINARY):
        _stop_group(pid)
        notes.append(f"stopped a leftover agent-sandbox controller (pid {pid})")
    PID_FILE.unlink(missing_ok=True)


def remove_leftovers(notes: list[str]) -> None:
    """What an interrupted run left: its controller, then its CRDs (and their objects)."""
    stop_leftover(notes)
    found = env.kubectl("get", "crd", "-o", "name", *CRDS, "--ignore-not-found", check=False)
    if found.strip():
        remove_crds()
        notes.append("deleted agent-sandbox's CRDs left by an interrupted run")
