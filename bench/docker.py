"""A private dockerd for the `docker run --runtime runsc` baseline (openblox's own path).

Docker comes from Debian's docker.io package, started by cluster/docker.sh (the one way
the project starts dockerd, shared with kind): its own data root, exec root and socket, no
bridge and no iptables rules, so it cannot touch the cluster's containerd, CNI bridge or
kube-proxy/kube-router chains. Its runsc is the node's gVisor build, always with
networking off, on systrap like the cluster's handler.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bench import env, memory_parts, page_share, procs

# The project's one dockerd (cluster/docker.sh): its own data root and socket, no bridge,
# no iptables rules, and a runsc runtime (the node's gVisor, networking off, systrap).
DOCKER_SCRIPT = env.REPO / "cluster" / "docker.sh"
# Debian's CLI speaks the daemon's API; a newer `docker` first on PATH may not.
DOCKER_CLI = "/usr/bin/docker"

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


# A Sandbox's pod also has runsc apply its seccomp profile inside the Sentry (runsc's
# oci-seccomp, docs/adr/0007); this runtime and profile give a Docker container the same.
SECCOMP_RUNTIME = "runsc-oci-seccomp"
SECCOMP_PROFILE = env.REPO / "cluster" / "seccomp" / "sandbox.json"


def idle_container(
    name: str, label: str, *, memory: str, cpus: str, seccomp: bool = False
) -> list[str]:
    """`docker run -d` arguments for an idle container with openblox's flags and limits
    (memory without swap), labelled for the benchmark's clean-up; with seccomp, also the
    Sandbox's seccomp profile, enforced inside the Sentry as in a Sandbox's pod."""
    flags = list(OPENBLOX_FLAGS)
    if seccomp:
        flags[flags.index("runsc")] = SECCOMP_RUNTIME
        flags += ["--security-opt", f"seccomp={SECCOMP_PROFILE}"]
    return [
        "run",
        "-d",
        "--name",
        name,
        "--label",
        f"openblox.bench={label}",
        *flags,
        "--memory",
        memory,
        "--memory-swap",
        memory,
        "--cpus",
        cpus,
        env.SANDBOX_IMAGE,
        "sleep",
        "infinity",
    ]


def _iptables_rules() -> int | None:
    try:
        out = subprocess.run(["iptables-save"], capture_output=True, check=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return sum(1 for line in out.stdout.splitlines() if line.startswith(b"-A"))


def _docker_script(command: str) -> str:
    """cluster/docker.sh COMMAND; its DOCKER_HOST (from the export line it prints)."""
    out = env.run([str(DOCKER_SCRIPT), command], timeout=120).stdout.decode()
    for line in out.splitlines():
        if line.startswith("export DOCKER_HOST="):
            return line.removeprefix("export DOCKER_HOST=")
    raise RuntimeError(f"cluster/docker.sh {command} printed no DOCKER_HOST: {out!r}")


class Docker:
    def __init__(self) -> None:
        self.problem: str | None = None
        self.notes: list[str] = []
        self.host = _docker_script("env")
        self._started = False

    def argv(self, *args: str) -> list[str]:
        return [DOCKER_CLI, "-H", self.host, *args]

    def run(self, *args: str, timeout: float = 120, stdin: bytes | None = None) -> bytes:
        return env.run(self.argv(*args), timeout=timeout, stdin=stdin).stdout

    def _answers(self) -> bool:
        try:
            env.run(self.argv("version", "--format", "{{.Server.Version}}"), timeout=10)
        except (RuntimeError, OSError, subprocess.TimeoutExpired):
            return False
        return True

    def start(self) -> bool:
        """Starts (or reuses) the project's dockerd; False with .problem set if it cannot."""
        if shutil.which("dockerd") is None or not Path(DOCKER_CLI).exists():
            self.problem = (
                "Docker is not installed: `cluster/docker.sh install` installs Debian's docker.io"
            )
            return False
        if not self._answers():
            before = _iptables_rules()
            try:
                self.host = _docker_script("start")
            except RuntimeError as error:
                self.problem = f"dockerd did not start: {error}"
                return False
            self._started = True
            after = _iptables_rules()
            if before is not None and after is not None and before != after:
                self.notes.append(
                    f"iptables rule count changed while dockerd started ({before} -> {after}); "
                    "kube-proxy resyncs too, so this may not be dockerd's doing"
                )
        info = json.loads(self.run("info", "--format", "{{json .}}"))
        missing = {"runsc", SECCOMP_RUNTIME} - set(info.get("Runtimes") or {})
        if missing:
            self.problem = f"the project's dockerd has no runtime {', '.join(sorted(missing))}"
            return False
        self.notes.append(
            f"Docker {info.get('ServerVersion')} (Debian docker.io, cluster/docker.sh), storage "
            f"{info.get('Driver')}, cgroup driver {info.get('CgroupDriver')}, "
            "runtime runsc (node runsc, --network=none --platform=systrap; "
            f"{SECCOMP_RUNTIME} adds --oci-seccomp)"
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

    def _others(self) -> bool:
        """True unless the daemon answers with no containers at all (or cannot be asked)."""
        try:
            return bool(self.run("ps", "-aq").split())
        except (RuntimeError, OSError, subprocess.TimeoutExpired):
            return True

    def stop(self) -> None:
        """Removes the benchmark's containers; stops dockerd only if this object started it
        and nothing else runs on it (a kind cluster started meanwhile keeps running)."""
        with contextlib.suppress(RuntimeError, OSError, subprocess.TimeoutExpired):
            self.remove_all()
        if self._started and self._others():
            self.notes.append("dockerd left running: containers other than the benchmark's")
            self._started = False
        if self._started:
            with contextlib.suppress(RuntimeError, OSError, subprocess.TimeoutExpired):
                env.run([str(DOCKER_SCRIPT), "stop"], timeout=120)
            self._started = False


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
    full = docker.run("inspect", "--format", "{{.Id}}", container).decode().strip()
    table = procs.processes()
    return procs.descendants(table, procs.shims_for(table, [full]))


def measure_idle(
    ctx: Any,
    section: Any,
    label: str,
    counts: Iterable[int],
    *,
    memory: str,
    cpus: str,
    seccomp: bool = False,
) -> dict[int, dict[str, Any]]:
    """Idle docker runsc containers started up to each of counts, measured at each: the
    PSS of every container's processes (MiB) and the mean per process role. They are
    removed at the end. A dockerd that cannot run them, or a container that does not
    start, is a note on the section."""
    docker = shared(ctx)
    if docker.problem:
        section.notes.append(f"docker baseline not measured: {docker.problem}")
        return {}
    section.notes.extend(n for n in docker.notes if n not in section.notes)
    variant = "seccomp" if seccomp else "plain"
    names: list[str] = []
    measured: dict[int, dict[str, Any]] = {}
    try:
        for count in sorted(set(counts)):
            while len(names) < count:
                names.append(f"obx-bench-{label}-{ctx.run_id}-{variant}-{len(names)}")
                docker.run(
                    *idle_container(names[-1], label, memory=memory, cpus=cpus, seccomp=seccomp)
                )
            time.sleep(ctx.seconds(5.0, 1.0))
            trees = [container_pids(name, docker) for name in names]
            # As for the Sandboxes: the runsc and shim binaries' pages divided among
            # these containers only, not with the node's Sandboxes or kind's nodes.
            extra = page_share.extra_pss(pid for pids in trees for pid in pids)
            measured[count] = {
                "pss": [procs.memory_of(pids, extra)["pss"] / 2**20 for pids in trees],
                "pss_kernel": [procs.memory_of(pids)["pss"] / 2**20 for pids in trees],
                "parts": memory_parts.mean([memory_parts.breakdown(pids, extra) for pids in trees]),
            }
            ctx.log(f"{label}: {count} docker runsc containers ({variant}) measured")
    except RuntimeError as error:
        # What was measured stays; the figures of the Sandboxes are recorded without it.
        section.notes.append(f"docker baseline ({variant}) stopped at {len(names)}: {error}")
    finally:
        with contextlib.suppress(RuntimeError):
            if names:
                docker.run("rm", "-f", *names, timeout=300)
    return measured
