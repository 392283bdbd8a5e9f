"""Where an idle sandbox's host memory goes: PSS per process, grouped by what it is.

A gVisor pod and a `docker run --runtime runsc` container are both a tree of processes
under a containerd shim; this names each process by its role (the shim, the Sentry, its
systrap stubs, a gofer, a `runsc wait`) so the two trees can be compared line by line.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from bench import procs

MIB = 2**20
FIELDS = ("pss", "pss_anon", "pss_file", "pss_shmem")


def role(process: procs.Process, table: Mapping[int, procs.Process]) -> str:
    argv = process.argv
    name = Path(argv[0]).name if argv else "?"
    # A systrap stub is forked from the Sentry (or from another stub) and then unmaps
    # everything, its arguments included, so it reads either as the Sentry's command line
    # or as none at all.
    if name in ("runsc-sandbox", "?") and _sentry_above(process, table):
        return "systrap stubs (children of the Sentry)"
    if "containerd-shim" in name:
        return f"shim ({name})"
    if name == "runsc-sandbox":
        return "Sentry (runsc-sandbox)"
    if name.startswith("runsc"):
        for command in ("gofer", "wait", "events", "exec", "start", "create", "state"):
            if command in argv[1:]:
                return f"runsc {command}"
    return name


def _sentry_above(process: procs.Process, table: Mapping[int, procs.Process]) -> bool:
    """Whether the nearest ancestor with a command line is a runsc-sandbox."""
    parent = table.get(process.ppid)
    for _ in range(8):  # stubs nest a level or two; a bound keeps a pid loop finite
        if parent is None:
            return False
        if parent.argv:
            return Path(parent.argv[0]).name == "runsc-sandbox"
        parent = table.get(parent.ppid)
    return False


def breakdown(
    pids: Iterable[int], extra: Mapping[int, float] | None = None
) -> dict[str, dict[str, int]]:
    """role -> processes and summed PSS (bytes) of the pids in that role (`extra` as in
    procs.memory_of)."""
    table = procs.processes()
    parts: dict[str, dict[str, int]] = {}
    for pid in pids:
        process = table.get(pid)
        if process is None:
            continue
        memory = procs.memory_of([pid], extra)
        if not memory["processes"]:
            continue
        part = parts.setdefault(role(process, table), dict.fromkeys(("processes", *FIELDS), 0))
        part["processes"] += 1
        for key in FIELDS:
            part[key] += memory[key]
    return parts


def mean(trees: list[dict[str, dict[str, int]]]) -> dict[str, dict[str, float]]:
    """The per-sandbox mean of several breakdowns (one per sandbox)."""
    roles = sorted({name for tree in trees for name in tree})
    count = max(len(trees), 1)
    return {
        name: {
            key: sum(tree.get(name, {}).get(key, 0) for tree in trees) / count
            for key in ("processes", *FIELDS)
        }
        for name in roles
    }


def table_rows(
    sandbox: Mapping[str, Mapping[str, float]], docker: Mapping[str, Mapping[str, float]]
) -> list[list[object]]:
    """One row per role: processes and PSS (total, anon, file, shmem) in MiB, both sides."""

    def cells(part: Mapping[str, float] | None) -> list[object]:
        if not part:
            return ["-", "-"]
        split = " / ".join(f"{part[k] / MIB:.1f}" for k in ("pss_anon", "pss_file", "pss_shmem"))
        return [f"{part['processes']:.1f}", f"{part['pss'] / MIB:.1f} ({split})"]

    rows: list[list[object]] = []
    for name in sorted(set(sandbox) | set(docker)):
        rows.append([name, *cells(sandbox.get(name)), *cells(docker.get(name))])
    totals = [
        {k: sum(p[k] for p in side.values()) for k in ("processes", *FIELDS)} if side else None
        for side in (sandbox, docker)
    ]
    rows.append(["total", *cells(totals[0]), *cells(totals[1])])
    return rows


HEADER = [
    "process",
    "Sandbox: processes",
    "Sandbox: PSS MiB (anon / file / shmem)",
    "docker runsc: processes",
    "docker runsc: PSS MiB (anon / file / shmem)",
]
