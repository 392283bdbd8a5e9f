"""Which containerd shims and gofers serve a pod, read from its node's process table.

A container under gVisor may have a gofer (`runsc-gofer ... gofer --bundle <bundle>`, the
bundle's last path element being the container's ID); a pod's first (pause) container
also has the sandbox process (`runsc-sandbox ... boot --bundle=<bundle>`). `runsc create`
exits once the container exists, and both are then re-parented to the shim, which is a
child subreaper. So a container's shim is the parent of those processes. With shim
grouping (cluster/runsc-shim.toml), every container of a pod has the same shim, the one
containerd started for the pod sandbox (`-id <pod sandbox ID>`), and no shim has a
container's ID; with the node's EROFS image of the pause rootfs (docs/adr/0013), the pause
container has no gofer, and with the node's images of container rootfs (docs/adr/0014),
a sandbox's container has none either, so neither process names it.
The same checks run on the embedded node (this machine's /proc) and on a kind node (`ps`
inside the node container).
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


def runsc_bundle(argv: Sequence[str], command: str) -> str | None:
    """The bundle directory of a runsc `command` ("gofer" or "boot") process, or None when
    argv is not one."""
    if not argv or not Path(argv[0]).name.startswith("runsc") or command not in argv:
        return None
    rest = list(argv[argv.index(command) + 1 :])
    for i, arg in enumerate(rest):
        if arg == "--bundle" and i + 1 < len(rest):
            return rest[i + 1]
        if arg.startswith("--bundle="):
            return arg.removeprefix("--bundle=")
    return None


def _serving(
    processes: Sequence[Process], container_ids: Sequence[str], command: str
) -> list[tuple[str, Process]]:
    """(container ID, process) for each runsc `command` process of these containers."""
    found = []
    for process in processes:
        bundle = runsc_bundle(process.argv, command)
        if bundle is not None and Path(bundle).name in container_ids:
            found.append((Path(bundle).name, process))
    return found


def gofers_of(processes: Sequence[Process], container_ids: Sequence[str]) -> dict[str, Process]:
    """Container ID -> its gofer, for those of these containers that have one."""
    gofers: dict[str, Process] = {}
    for cid, gofer in _serving(processes, container_ids, "gofer"):
        if cid in gofers:
            raise AssertionError(f"two gofers for container {cid}: {gofers[cid]}, {gofer}")
        gofers[cid] = gofer
    return gofers


def shims_of(processes: Sequence[Process], container_ids: Sequence[str]) -> dict[str, Process]:
    """Container ID -> the shim serving it (the parent of its gofer or sandbox process)."""
    by_pid = {p.pid: p for p in processes}
    served: dict[str, Process] = {}
    for command in ("gofer", "boot"):
        for cid, process in _serving(processes, container_ids, command):
            parent = by_pid.get(process.ppid)
            if parent is None or not parent.argv or Path(parent.argv[0]).name != SHIM:
                continue
            if served.setdefault(cid, parent).pid != parent.pid:
                raise AssertionError(f"container {cid} has two shims: {served[cid]}, {parent}")
    missing = [c for c in container_ids if c not in served]
    if missing:
        raise AssertionError(f"no gofer or sandbox process under a {SHIM} for containers {missing}")
    return served


def shims_started_for(processes: Sequence[Process], ids: Sequence[str]) -> list[Process]:
    """The shims containerd started for one of these pod sandbox or container IDs."""
    found = []
    for process in processes:
        argv = process.argv
        if argv and Path(argv[0]).name == SHIM:
            started = [argv[i + 1] for i in range(len(argv) - 1) if argv[i] == "-id"]
            if any(i in ids for i in started):
                found.append(process)
    return found


def runsc_waits(processes: Sequence[Process], container_ids: Sequence[str]) -> list[Process]:
    """`runsc ... wait <id>` processes for these containers. The patched shim waits for a
    container over the sandbox's control socket instead (docs/adr/0012), so on the
    embedded node there are none; gVisor's released shim, on the kind nodes, keeps one
    per container."""
    return [
        p
        for p in processes
        if len(p.argv) >= 2
        and Path(p.argv[0]).name.startswith("runsc")
        and "wait" in p.argv[1:]
        and p.argv[-1] in container_ids
    ]
