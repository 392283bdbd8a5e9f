"""Density of the shipped profile: how many idle `code-exec` Sandboxes one node holds, and
their host memory per Sandbox at 1, 10 and 50 (or as many as fit) against the same number
of `docker run --runtime runsc` containers with openblox's flags and code-exec's limits
(512m memory, 0.5 CPU), measured in the same run.

The ramp creates code-exec Sandboxes a few at a time until the next would not fit: the
node's CPU or memory requests (read from the live profile and RuntimeClass, as the
scheduler counts them, less `--reserve-cpu` for other users), host MemAvailable, or the
time budget. At each checkpoint the node is left idle for a moment, then the PSS of every
process under each pod's shims is read and split by role (bench/memory_parts.py): shims
per pod, the Sentry, its stubs, gofers, `runsc wait`. Once the Sandboxes are gone, Docker
containers are started up to each count the ramp measured, and measured the same way.
Both run the same runsc binary, whose pages PSS splits between every process that maps
them, so each side is compared with the other at the same count.
"""

from __future__ import annotations

import contextlib
import statistics
import threading
import time
from typing import Any

from bench import docker as docker_mod
from bench import env, memory_parts
from bench.cluster_side import (
    Kube,
    delete_namespace,
    make_namespace,
    node_capacity,
    node_pods,
    pod_memory,
)
from bench.results import Section
from openblox.client import Client
from openblox.models import parse_profile, parse_quantity

TITLES = {"density": "Idle code-exec Sandboxes on one node; host memory per idle Sandbox vs Docker"}
PROFILE = "code-exec"
POINTS = (1, 10, 50)
MIB = 2**20
MIN_AVAILABLE = 3 * 2**30
CONCURRENCY = 4
CREATE_TIMEOUT = 180.0
MAX_FAILURES = 3
SHIM_ROLE = "shim (containerd-shim-runsc-v1)"


def _pod_requests(kube: Kube) -> tuple[float, float, str]:
    """code-exec's pod as the scheduler counts it: CPU millicores and memory MiB (the
    container's requests plus the RuntimeClass's overhead), and how it was read."""
    data = kube.get(f"/api/v1/namespaces/{env.OPERATOR_NAMESPACE}/configmaps/openblox-profiles")
    profile = parse_profile(PROFILE, data["data"][PROFILE])
    resources = profile.resources
    runtime = kube.get(f"/apis/node.k8s.io/v1/runtimeclasses/{profile.runtime_class_name}")
    fixed = (runtime.get("overhead") or {}).get("podFixed") or {}
    overhead_m = float(parse_quantity(fixed.get("cpu", "0"))) * 1000
    cpu = resources.effective_cpu_request.value + overhead_m
    memory = (resources.memory.value + float(parse_quantity(fixed.get("memory", "0")))) / MIB
    how = (
        f"cpu request {resources.effective_cpu_request.text} (limit {resources.cpu.text}), "
        f"memory {resources.memory.text}, RuntimeClass overhead "
        f"{fixed.get('cpu', '0')} / {fixed.get('memory', '0')}"
    )
    return cpu, memory, how


class Ramp:
    def __init__(self, ctx: Any, cpu_m: float, memory_mib: float) -> None:
        self.kube: Kube = ctx.kube
        self.namespace = make_namespace(
            self.kube, f"obx-bench-density-{ctx.run_id}", sandboxes=True
        )
        self.client = Client(self.namespace, kubeconfig=env.KUBECONFIG)
        self.cpu_m = cpu_m
        self.memory_mib = memory_mib
        self.reserve_cpu: int = ctx.args.reserve_cpu
        self.live: list[str] = []
        self.failures: list[str] = []
        self.latencies: list[float] = []
        self.stopped = ""
        self.count = 0
        self.guard = threading.Lock()

    def _room(self, in_flight: int) -> str:
        """Why one more would not fit, or "" if it would."""
        capacity = node_capacity(self.kube)
        cpu = capacity["cpu_free_m"] - in_flight * self.cpu_m - self.reserve_cpu
        memory = capacity["memory_free_mib"] - in_flight * self.memory_mib
        if cpu < self.cpu_m:
            return (
                f"CPU requests: {capacity['cpu_free_m']:.0f}m free of "
                f"{capacity['cpu_allocatable_m']:.0f}m allocatable, {self.reserve_cpu}m kept "
                f"for other users, and each code-exec pod requests {self.cpu_m:.0f}m"
            )
        if memory < self.memory_mib:
            return (
                f"memory requests: {capacity['memory_free_mib']:.0f} MiB free of "
                f"{capacity['memory_allocatable_mib']:.0f} MiB allocatable, and each "
                f"code-exec pod requests {self.memory_mib:.0f} MiB"
            )
        if env.meminfo().get("MemAvailable", 0) < MIN_AVAILABLE:
            return f"host MemAvailable below {MIN_AVAILABLE / 2**30:.0f} GiB"
        return ""

    def fill(self, target: int, deadline: float) -> bool:
        in_flight = [0]

        def worker() -> None:
            while True:
                with self.guard:
                    if self.stopped or len(self.live) + in_flight[0] >= target:
                        return
                    if time.monotonic() > deadline:
                        self.stopped = "the ramp's time budget ran out"
                        return
                    problem = self._room(in_flight[0])
                    if problem:
                        self.stopped = problem
                        return
                    in_flight[0] += 1
                    self.count += 1
                    name = f"d{self.count:03d}"
                started = time.monotonic()
                try:
                    self.client.create(PROFILE, name=name, timeout=CREATE_TIMEOUT)
                    ok = True
                except Exception as error:
                    ok = False
                    self.failures.append(f"{name}: {type(error).__name__}: {error}"[:300])
                    with contextlib.suppress(Exception):
                        self.client.delete(name)
                with self.guard:
                    in_flight[0] -= 1
                    if ok:
                        self.live.append(name)
                        self.latencies.append((time.monotonic() - started) * 1000)
                    elif len(self.failures) >= MAX_FAILURES:
                        self.stopped = f"{len(self.failures)} creates failed"

        threads = [threading.Thread(target=worker) for _ in range(CONCURRENCY)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return not self.stopped and len(self.live) >= target

    def measure(self, ctx: Any) -> dict[str, Any]:
        time.sleep(ctx.seconds(8.0, 2.0))  # idle: let the last creates' work finish
        per_pod = pod_memory(
            {k: v for k, v in node_pods(self.namespace).items() if k in set(self.live)}
        )
        breakdowns = [memory_parts.breakdown(m["pids"], m["extra"]) for m in per_pod.values()]
        return {
            "live": len(self.live),
            "pss": [m["pss"] / MIB for m in per_pod.values()],
            "working_set": [m["cgroup"].get("working_set", 0) / MIB for m in per_pod.values()],
            "shims": [b.get(SHIM_ROLE, {}).get("processes", 0) for b in breakdowns],
            "parts": memory_parts.mean(breakdowns),
            "available_gib": env.meminfo()["MemAvailable"] / 2**30,
        }


def run(ctx: Any, section: Section) -> None:
    kube: Kube = ctx.kube
    cpu_m, memory_mib, how = _pod_requests(kube)
    section.notes.append(f"{PROFILE} as the scheduler counts it: {how}")
    target = ctx.args.density_max if not ctx.quick else 3
    points = sorted({p for p in POINTS if p <= target} | {target}) if not ctx.quick else [1, 3]
    start = node_capacity(kube)
    ramp = Ramp(ctx, cpu_m, memory_mib)
    measured: list[dict[str, Any]] = []
    deadline = time.monotonic() + ctx.seconds(6 * 60.0, 120.0)
    try:
        for point in points:
            reached = ramp.fill(point, deadline)
            if ramp.live and (reached or not measured or measured[-1]["live"] < len(ramp.live)):
                measured.append(ramp.measure(ctx))
                ctx.log(f"density: {len(ramp.live)} live, {ramp.stopped or 'ok'}")
            if not reached:
                break
    finally:
        delete_namespace(kube, ramp.namespace, wait=300)
    counts = [point["live"] for point in measured]
    docker = docker_mod.measure_idle(ctx, section, "density", counts, memory="512m", cpus="0.5")
    docker_seccomp = docker_mod.measure_idle(
        ctx, section, "density", counts, memory="512m", cpus="0.5", seccomp=True
    )
    _record(section, ramp, measured, docker, start)
    _record_seccomp_baseline(section, measured, docker_seccomp)
    if not measured:
        section.status = "failed"
        section.error = f"no code-exec Sandbox became Ready: {ramp.stopped or ramp.failures}"


def _record_seccomp_baseline(
    section: Section, measured: list[dict[str, Any]], docker: dict[int, dict[str, Any]]
) -> None:
    """Docker containers with the Sandbox's seccomp profile enforced inside the Sentry, as
    a Sandbox's pod has it (docs/adr/0007), beside the Sandboxes at the same count."""
    rows = []
    for point in measured:
        live, run = point["live"], docker.get(point["live"])
        if not run or not run["pss"]:
            continue
        section.figure(
            f"density.pss.docker_runsc_seccomp.{live}",
            f"host PSS per idle docker runsc container with the Sandbox's seccomp profile "
            f"enforced in the Sentry (--oci-seccomp), {live} running",
            "MiB",
            run["pss"],
            baseline=f"density.pss.docker_runsc.{live}",
            group="pss",
            label=f"docker runsc with the Sandbox's seccomp, {live} running",
        )
        if point["pss"]:
            ratio = statistics.median(point["pss"]) / statistics.median(run["pss"])
            rows.append(
                [
                    live,
                    round(statistics.median(point["pss"]), 1),
                    round(statistics.median(run["pss"]), 1),
                    f"{ratio:.2f}x",
                ]
            )
    if rows:
        section.table(
            "Sandbox against docker runsc with the same in-Sentry seccomp (p50)",
            ["Sandboxes (and Docker containers)", "Sandbox PSS MiB", "Docker PSS MiB", "ratio"],
            rows,
        )
        last = measured[-1]
        if docker.get(last["live"]):
            section.table(
                f"Where the memory of one idle code-exec Sandbox goes, {last['live']} running, "
                f"against one docker runsc container with the same in-Sentry seccomp "
                f"({last['live']} running)",
                memory_parts.HEADER,
                memory_parts.table_rows(last["parts"], docker[last["live"]]["parts"]),
            )


def _record(
    section: Section,
    ramp: Ramp,
    measured: list[dict[str, Any]],
    docker: dict[int, dict[str, Any]],
    start: dict[str, float],
) -> None:
    rows = []
    for point in measured:
        live = point["live"]
        baseline_run = docker.get(live, {})
        baseline = None
        if baseline_run.get("pss"):
            baseline = f"density.pss.docker_runsc.{live}"
            section.figure(
                baseline,
                f"host PSS per idle docker runsc container (512m, 0.5 CPU), {live} running",
                "MiB",
                baseline_run["pss"],
                group="pss",
                group_title="Host memory (PSS) per idle sandbox",
                label=f"docker run --runtime runsc (openblox flags), {live} running",
            )
        section.figure(
            f"density.pss.sandbox.{live}",
            f"host PSS per idle code-exec Sandbox, {live} running",
            "MiB",
            point["pss"],
            baseline=baseline,
            group="pss",
            label=f"code-exec Sandbox, {live} running",
            headline=live == measured[-1]["live"],
        )
        rows.append(
            [
                live,
                round(statistics.fmean(point["pss"]), 1) if point["pss"] else None,
                round(statistics.fmean(baseline_run["pss"]), 1) if baseline_run else None,
                round(statistics.fmean(point["working_set"]), 1) if point["working_set"] else None,
                ", ".join(str(n) for n in sorted(set(point["shims"]))),
                round(point["available_gib"], 2),
            ]
        )
        # With one running, each binary's pages are charged whole to its only user: the
        # table says which binaries a lone sandbox pays for.
        section.table(
            f"Where the memory of one idle code-exec Sandbox goes, {live} running, against "
            f"one docker runsc container ({live} running)",
            memory_parts.HEADER,
            memory_parts.table_rows(point["parts"], baseline_run.get("parts") or {}),
        )
    section.table(
        "Mean per idle code-exec Sandbox",
        [
            "Sandboxes (and Docker containers)",
            "PSS MiB",
            "Docker runsc PSS MiB",
            "pod cgroup working set MiB",
            "shims per pod",
            "MemAvailable GiB",
        ],
        rows,
    )
    section.figure(
        "density.live.max",
        "idle code-exec Sandboxes Ready at once on the node",
        "sandboxes",
        value=len(ramp.live),
        higher_is_better=True,
        headline=True,
        notes=f"stopped by {ramp.stopped}" if ramp.stopped else "reached the aim of the run",
    )
    if ramp.latencies:
        section.figure(
            "density.create.fill",
            f"code-exec create→Ready while filling, {CONCURRENCY} at a time",
            "ms",
            ramp.latencies,
        )
    empty = start["cpu_allocatable_m"] // ramp.cpu_m
    section.notes.append(
        f"At the start {start['cpu_free_m']:.0f}m of {start['cpu_allocatable_m']:.0f}m CPU and "
        f"{start['memory_free_mib']:.0f} of {start['memory_allocatable_mib']:.0f} MiB of "
        f"requests were free ({start['pods']:.0f} pods running, openblox's own and other "
        f"sessions'); an empty node would hold {empty:.0f} by CPU requests and "
        f"{start['memory_allocatable_mib'] // ramp.memory_mib:.0f} by memory requests."
    )
    if ramp.failures:
        section.notes.append("failed creates: " + "; ".join(ramp.failures[:5]))
    section.notes.append(
        "PSS sums /proc/<pid>/smaps_rollup over every process under the pod's containerd "
        "shims, so pages shared between sandboxes (the runsc binary) are split between them; "
        "the pages of the runsc and shim binaries and of the rootfs images are split among "
        "the sandboxes measured only, not with others on the host (bench/page_share.py). "
        "The cgroup working set counts the Sentry's guest memory and tmpfs, not the shims."
    )
