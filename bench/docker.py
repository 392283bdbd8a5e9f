"""A private dockerd for the `docker run --runtime runsc` baseline (openblox's own path).

Docker comes from Debian's docker.io package. The daemon started here has its own data
root, exec root and socket, no bridge and no iptables rules, so it cannot touch the
cluster's containerd, CNI bridge or kube-proxy/kube-router chains. Its runsc is the node's
gVisor build, always with networking off, on systrap like the cluster's handler.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from bench import env

SOCKET = env.BENCH_RUN / "docker.sock"
WRAPPER = env.BENCH_STATE / "runsc-docker"
CONFIG = env.BENCH_STATE / "daemon.json"
LOG = env.BENCH_STATE / "dockerd.log"

# openblox's own `docker run` flags: the same restrictions its Go library asks Docker for.
OPENBLOX_FLAGS = [
    "--runtime",
    "runsc",
    "--network",
    "none",
    "--read-only",
    "--user",
    "1000:1000",
    "--cap-drop",
    "ALL",
    "--security-opt",
    "no-new-privileges",
    "--tmpfs",
    "/tmp:rw,noexec,nosuid,nodev,size=128m",
    "--tmpfs",
    "/workspace:rw,noexec,nosuid,nodev,size=128m,uid=1000,gid=1000",
    "--pids-limit",
    "256",
    "--init",
]

_WRAPPER_TEXT = """#!/bin/sh
# runsc for the benchmark's private dockerd: networking off, systrap (as the cluster's).
# `start` output goes through a file: runsc leaves a gofer holding the shim's pipe open.
set -- --network=none --platform=systrap "$@"
case " $* " in
  *" start "*)
    out=$(mktemp -p {run} runsc-start.XXXXXX)
    {runsc} "$@" >"$out" 2>&1
    status=$?
    cat "$out"
    rm -f "$out"
    exit $status ;;
esac
exec {runsc} "$@"
"""


def _iptables_rules() -> int | None:
    try:
        out = subprocess.run(["iptables-save"], capture_output=True, check=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return sum(1 for line in out.stdout.splitlines() if line.startswith(b"-A"))


class Docker:
    def __init__(self) -> None:
        self.problem: str | None = None
        self.notes: list[str] = []
        self._process: subprocess.Popen[bytes] | None = None

    def argv(self, *args: str) -> list[str]:
        return ["docker", "-H", f"unix://{SOCKET}", *args]

    def run(self, *args: str, timeout: float = 120, stdin: bytes | None = None) -> bytes:
        return env.run(self.argv(*args), timeout=timeout, stdin=stdin).stdout

    def _answers(self) -> bool:
        if not SOCKET.exists():
            return False
        try:
            env.run(self.argv("version", "--format", "{{.Server.Version}}"), timeout=10)
        except (RuntimeError, OSError, subprocess.TimeoutExpired):
            return False
        return True

    def start(self) -> bool:
        """Starts (or reuses) the private dockerd; False with .problem set if it cannot."""
        if shutil.which("dockerd") is None or shutil.which("docker") is None:
            self.problem = (
                "Docker is not installed: `apt-get install --no-install-recommends docker.io` "
                "(Debian's package) provides it"
            )
            return False
        env.BENCH_STATE.mkdir(parents=True, exist_ok=True)
        env.BENCH_RUN.mkdir(parents=True, exist_ok=True)
        WRAPPER.write_text(_WRAPPER_TEXT.format(run=env.BENCH_RUN, runsc=env.tool("runsc")))
        WRAPPER.chmod(0o755)
        config: dict[str, Any] = {
            "runtimes": {"runsc": {"path": str(WRAPPER)}},
            "iptables": False,
            "ip6tables": False,
            "ip-forward": False,
            "ip-masq": False,
            "bridge": "none",
            "data-root": str(env.BENCH_STATE / "docker"),
            "exec-root": str(env.BENCH_RUN / "docker"),
            "pidfile": str(env.BENCH_RUN / "docker.pid"),
            "hosts": [f"unix://{SOCKET}"],
            "storage-driver": "overlay2",
        }
        CONFIG.write_text(json.dumps(config, indent=1) + "\n")
        if not self._answers():
            before = _iptables_rules()
            with LOG.open("ab") as log:
                self._process = subprocess.Popen(
                    ["dockerd", "--config-file", str(CONFIG)],
                    stdout=log,
                    stderr=log,
                    start_new_session=True,
                )
            deadline = time.monotonic() + 60
            while not self._answers():
                if self._process.poll() is not None or time.monotonic() > deadline:
                    tail = LOG.read_text(errors="replace")[-600:] if LOG.exists() else ""
                    self.problem = f"dockerd did not start: {tail.strip()}"
                    self.stop()
                    return False
                time.sleep(0.5)
            after = _iptables_rules()
            if before is not None and after is not None and before != after:
                self.notes.append(
                    f"iptables rule count changed while dockerd started ({before} -> {after}); "
                    "kube-proxy resyncs too, so this may not be dockerd's doing"
                )
        info = json.loads(self.run("info", "--format", "{{json .}}"))
        if "runsc" not in (info.get("Runtimes") or {}):
            self.problem = "the private dockerd has no runsc runtime"
            return False
        self.notes.append(
            f"Docker {info.get('ServerVersion')} (Debian docker.io), storage "
            f"{info.get('Driver')}, cgroup driver {info.get('CgroupDriver')}, "
            f"runtime runsc = {WRAPPER} (node runsc, --network=none --platform=systrap)"
        )
        self._ensure_image()
        return True

    def _ensure_image(self) -> None:
        try:
            self.run("image", "inspect", env.SANDBOX_IMAGE)
            return
        except RuntimeError:
            pass
        exported = env.run(
            [
                env.tool("ctr"),
                "--address",
                env.CRI_ENDPOINT.removeprefix("unix://"),
                "-n",
                "k8s.io",
                "images",
                "export",
                "--platform",
                "linux/amd64",
                "-",
                env.SANDBOX_IMAGE,
            ],
            timeout=300,
        ).stdout
        self.run("load", timeout=300, stdin=exported)

    def remove_all(self, label: str = "openblox.bench") -> None:
        ids = self.run("ps", "-aq", "--filter", f"label={label}").decode().split()
        if ids:
            with contextlib.suppress(RuntimeError):
                self.run("rm", "-f", *ids, timeout=300)

    def stop(self) -> None:
        """Stops the dockerd this object started (by its PID); leaves one it found running."""
        if self._process is None:
            return
        with contextlib.suppress(RuntimeError, OSError, subprocess.TimeoutExpired):
            self.remove_all()
        self._process.terminate()
        try:
            self._process.wait(30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(10)
        self._process = None


def shared(ctx: Any) -> Docker:
    """One dockerd for the run, stopped at its end."""
    docker: Docker | None = ctx.shared.get("docker")
    if docker is None:
        docker = Docker()
        if docker.start():
            ctx.cleanup(docker.stop)
        ctx.shared["docker"] = docker
    return docker


def container_pids(container: str, docker: Docker) -> list[int]:
    """The shim of a container and everything under it (runsc sandbox, gofer, stubs)."""
    from bench import procs

    full = docker.run("inspect", "--format", "{{.Id}}", container).decode().strip()
    table = procs.processes()
    return procs.descendants(table, procs.shims_for(table, [full]))


def pid_of(container: str, docker: Docker) -> Path:
    return Path(docker.run("inspect", "--format", "{{.State.Pid}}", container).decode().strip())
