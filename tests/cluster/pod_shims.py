"""Which containerd shims serve a pod, read from its node's process table.

Every container under gVisor has a gofer (`runsc-gofer ... gofer --bundle <bundle>`,
the bundle's last path element being the container's ID). Its `runsc create` exits once
the container exists, and the gofer is then re-parented to the shim, which is a child
subreaper. So a container's shim is the parent of its gofer. With shim grouping
(cluster/runsc-shim.toml), every container of a pod, the pause container among them, has
the same parent. The same check runs on the embedded node (this machine's /proc) and on
a kind node (`ps` inside the node container).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

SHIM = "containerd-shim-runsc-v1"

Run = Callable[[Sequence[str]], str]


@dataclass(frozen=True)
class Process:
    pid: int
    ppid: int
    argv: tuple[str, ...]


def parse_ps(text: str) -> list[Process]:
    """`ps -eo pid=,ppid=,args=` output, one process a line."""
    found = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[0].isdigit() and fields[1].isdigit():
            found.append(Process(int(fields[0]), int(fields[1]), tuple(fields[2:])))
    return found


def local_processes() -> list[Process]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        found.append(Process(int(entry.name), ppid, tuple(a.decode() for a in argv if a)))
    return found


def pod_containers(run: Run, namespace: str, pod: str) -> tuple[str, list[str]]:
    """The pod sandbox's ID and its running containers' IDs, as the node's CRI knows them."""
    pods = json.loads(run(["pods", "--namespace", namespace, "--name", pod, "-o", "json"]))
    ready = [p["id"] for p in pods["items"] if p["state"] == "SANDBOX_READY"]
    if len(ready) != 1:
        raise AssertionError(f"expected one ready pod sandbox for {namespace}/{pod}: {pods}")
    listing = json.loads(run(["ps", "--pod", ready[0], "--state", "running", "-o", "json"]))
    return ready[0], [c["id"] for c in listing["containers"]]


def gofer_bundle(argv: Sequence[str]) -> str | None:
    """The bundle directory a gofer serves, or None when argv is not a gofer's."""
    if not argv or not Path(argv[0]).name.startswith("runsc") or "gofer" not in argv:
        return None
    rest = list(argv[argv.index("gofer") + 1 :])
    for i, arg in enumerate(rest):
        if arg == "--bundle" and i + 1 < len(rest):
            return rest[i + 1]
        if arg.startswith("--bundle="):
            return arg.removeprefix("--bundle=")
    return None


def shims_of(processes: Sequence[Process], container_ids: Sequence[str]) -> dict[str, Process]:
    """Container ID -> the shim serving it (the parent of its gofer)."""
    by_pid = {p.pid: p for p in processes}
    served: dict[str, Process] = {}
    for process in processes:
        bundle = gofer_bundle(process.argv)
        if bundle is None or Path(bundle).name not in container_ids:
            continue
        parent = by_pid.get(process.ppid)
        if parent is not None and parent.argv and Path(parent.argv[0]).name == SHIM:
            served[Path(bundle).name] = parent
    missing = [c for c in container_ids if c not in served]
    if missing:
        raise AssertionError(f"no gofer under a {SHIM} for containers {missing}")
    return served


def runsc_waits(processes: Sequence[Process], container_ids: Sequence[str]) -> list[Process]:
    """`runsc ... wait <id>` processes for these containers. The patched shim waits for a
    container over the sandbox's control socket instead (docs/adr/0012), so on the
    project's nodes there are none."""
    return [
        p
        for p in processes
        if len(p.argv) >= 2
        and Path(p.argv[0]).name.startswith("runsc")
        and "wait" in p.argv[1:]
        and p.argv[-1] in container_ids
    ]
