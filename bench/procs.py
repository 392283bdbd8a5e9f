"""What processes cost the host, read from /proc and the cgroup v1 memory controller."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

PROC = Path("/proc")
MEMORY_CGROUP = Path("/sys/fs/cgroup/memory")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Process:
    pid: int
    ppid: int
    argv: list[str]
    children: list[int] = field(default_factory=list)


def processes() -> dict[int, Process]:
    table: dict[int, Process] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        # The command name may hold spaces and parentheses: fields start after the last ')'.
        fields = stat[stat.rindex(")") + 2 :].split()
        table[int(entry.name)] = Process(
            int(entry.name), int(fields[1]), [a.decode(errors="replace") for a in argv if a]
        )
    for process in table.values():
        parent = table.get(process.ppid)
        if parent is not None:
            parent.children.append(process.pid)
    return table


def descendants(table: dict[int, Process], roots: Iterable[int]) -> list[int]:
    """The roots and everything below them."""
    seen: list[int] = []
    stack = [pid for pid in roots if pid in table]
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.append(pid)
        stack.extend(table[pid].children)
    return seen


def shims_for(table: dict[int, Process], ids: Iterable[str]) -> list[int]:
    """containerd shims whose `-id` is one of ids (pod sandbox or container IDs)."""
    wanted = set(ids)
    found = []
    for process in table.values():
        argv = process.argv
        if not argv or "containerd-shim" not in argv[0]:
            continue
        for index, arg in enumerate(argv[:-1]):
            if arg == "-id" and argv[index + 1] in wanted:
                found.append(process.pid)
    return found


def smaps_rollup(pid: int) -> dict[str, int]:
    """Rss, Pss, ... of one process, in bytes (empty if it is gone)."""
    values: dict[str, int] = {}
    try:
        text = (PROC / str(pid) / "smaps_rollup").read_text()
    except OSError:
        return values
    for line in text.splitlines()[1:]:
        key, _, rest = line.partition(":")
        parts = rest.split()
        if len(parts) >= 2 and parts[1] == "kB":
            values[key.strip()] = int(parts[0]) * 1024
    return values


def memory_of(pids: Iterable[int], extra: Mapping[int, float] | None = None) -> dict[str, int]:
    """Summed Rss, Pss and Pss split (anon/file/shmem) over pids, in bytes; `extra` adds
    file pages' bytes to a process's Pss (bench/page_share.py)."""
    total = {"rss": 0, "pss": 0, "pss_anon": 0, "pss_file": 0, "pss_shmem": 0, "processes": 0}
    for pid in pids:
        rollup = smaps_rollup(pid)
        if not rollup:
            continue
        total["processes"] += 1
        total["rss"] += rollup.get("Rss", 0)
        total["pss"] += rollup.get("Pss", 0)
        total["pss_anon"] += rollup.get("Pss_Anon", 0)
        total["pss_file"] += rollup.get("Pss_File", 0)
        total["pss_shmem"] += rollup.get("Pss_Shmem", 0)
        added = round((extra or {}).get(pid, 0))
        total["pss"] += added
        total["pss_file"] += added
    return total


def cpu_seconds(pids: Iterable[int]) -> float:
    """User plus system CPU time consumed so far by pids (threads included)."""
    total = 0
    for pid in pids:
        try:
            stat = (PROC / str(pid) / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        total += int(fields[11]) + int(fields[12])
    return total / CLOCK_TICKS


def memory_cgroup(pid: int) -> Path | None:
    try:
        for line in (PROC / str(pid) / "cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if "memory" in controllers.split(","):
                return MEMORY_CGROUP / path.lstrip("/")
    except OSError:
        pass
    return None


def cgroup_memory(path: Path) -> dict[str, int]:
    """usage, working set (usage - inactive file, as the kubelet counts it), rss, shmem."""
    try:
        usage = int((path / "memory.usage_in_bytes").read_text())
        stat = {
            line.split()[0]: int(line.split()[1])
            for line in (path / "memory.stat").read_text().splitlines()
        }
    except (OSError, ValueError):
        return {}
    inactive = stat.get("total_inactive_file", 0)
    return {
        "usage": usage,
        "working_set": max(0, usage - inactive),
        "rss": stat.get("total_rss", 0),
        "cache": stat.get("total_cache", 0),
        "shmem": stat.get("total_shmem", 0),
    }
