"""Syscall and process-creation cost: native, gVisor systrap and gVisor ptrace (`runsc do`).

Runs outside the cluster, straight on the host, so it needs no pod and disturbs nobody.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

from bench import env, guest
from bench.results import Section

NEEDS_CLUSTER = False
TITLES = {"syscalls": "Syscall microbenchmarks: native vs gVisor systrap vs ptrace (runsc do)"}
DEBIAN_RUNSC = Path("/usr/bin/runsc")
# Reported in ns per call, except process creation (us) and the CPU loop (ms).
SCALE = {"spawn_true_ns": 1e3, "cpu_loop_ns": 1e6}
METRICS = ("getpid_ns", "stat_ns", "pread_ns", "open_close_ns", "spawn_true_ns", "cpu_loop_ns")


def _environments() -> dict[str, list[str]]:
    root = env.BENCH_RUN / "runsc"
    runsc = env.tool("runsc")
    found = {
        "native": [],
        "gvisor-systrap": [runsc, f"--root={root}", "--network=none", "--platform=systrap", "do"],
        "gvisor-ptrace": [runsc, f"--root={root}", "--network=none", "--platform=ptrace", "do"],
    }
    if DEBIAN_RUNSC.exists():
        found["gvisor-ptrace-debian2022"] = [
            str(DEBIAN_RUNSC),
            f"--root={root}-debian",
            "--network=none",
            "--platform=ptrace",
            "do",
        ]
    return found


def run(ctx: Any, section: Section) -> None:
    (env.BENCH_RUN / "runsc").mkdir(parents=True, exist_ok=True)
    repeats = ctx.n(3, 1)
    budget = ctx.seconds(0.5, 0.1)
    measured: dict[str, dict[str, list[float]]] = {}
    startup: dict[str, list[float]] = {}
    for name, prefix in _environments().items():
        ctx.log(f"syscalls: {name}")
        measured[name] = {metric: [] for metric in METRICS}
        startup[name] = []
        for attempt in range(repeats):
            started = time.monotonic()
            env.run([*prefix, "python3", "-c", "pass"], timeout=120)
            startup[name].append((time.monotonic() - started) * 1000)
            result = env.run([*prefix, "python3", "-c", guest.MICRO, str(budget)], timeout=300)
            data = json.loads(result.stdout.decode().strip().splitlines()[-1])
            for metric in METRICS:
                measured[name][metric].append(data[metric] / SCALE.get(metric, 1))
            if attempt == 0:
                section.notes.append(f"{name}: kernel {data['kernel']}")

    labels = {
        "getpid_ns": ("getpid()", "ns/call"),
        "stat_ns": ("stat()", "ns/call"),
        "pread_ns": ("pread() 64 B", "ns/call"),
        "open_close_ns": ("open()+close()", "ns/pair"),
        "spawn_true_ns": ("fork+exec /bin/true (subprocess.run)", "us/process"),
        "cpu_loop_ns": ("CPU loop, 3M iterations", "ms"),
    }
    for metric, (title, unit) in labels.items():
        for name in measured:
            section.figure(
                f"syscalls.{metric}.{name}",
                f"{title}: {name}",
                unit,
                measured[name][metric],
                baseline=None if name == "native" else f"syscalls.{metric}.native",
            )
    for name, samples in startup.items():
        section.figure(
            f"syscalls.startup.{name}",
            f"`python3 -c pass` wall time incl. sandbox start: {name}",
            "ms",
            samples,
            baseline=None if name == "native" else "syscalls.startup.native",
        )
    rows = []
    for metric, (title, unit) in labels.items():
        native = statistics.median(measured["native"][metric])
        row: list[Any] = [title, unit, round(native, 1)]
        for name in measured:
            if name == "native":
                continue
            value = statistics.median(measured[name][metric])
            row.append(f"{value:,.0f} ({value / native:.1f}x)")
        rows.append(row)
    section.table(
        "Median per operation (ratio to native)",
        ["operation", "unit", "native", *[n for n in measured if n != "native"]],
        rows,
    )
    section.notes.append(
        "`runsc do` runs a command in a fresh gVisor sandbox over the host's root "
        "filesystem; the cluster's runsc handler uses the same binary with systrap. "
        "ptrace is the only platform the 2022 Debian runsc has."
    )
