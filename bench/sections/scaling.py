"""Host memory per idle sandbox (1, 10, 50) and scaling from 1 to as many live sandboxes
as fit (aiming for 200): create latency, operator cost and host memory as the count grows.

Both come from one ramp of `bench-idle` Sandboxes (cpu 10m, memory 64Mi, gVisor: about
the least a Sandbox can ask for and still become Ready, so the most fit). Their own
create→Ready is throttled by their CPU limit, so at each checkpoint the node is first
left idle for a moment and measured, then the create latency is measured with
`bench-small` probe Sandboxes (cpu 100m), created one at a time and deleted again.
Baselines, measured first on an empty node: the same number of bare runc pods and of
`docker run --runtime runsc` containers with openblox's flags.
"""

from __future__ import annotations

import contextlib
import itertools
import statistics
import threading
import time
from typing import Any

from bench import docker as docker_mod
from bench import env, memory_parts
from bench.cluster_side import (
    IDLE_PROFILE,
    SMALL_PROFILE,
    FlowCounter,
    Kube,
    Operator,
    WatchRecorder,
    bare_pod,
    delete_namespace,
    make_namespace,
    node_capacity,
    node_pods,
    pod_memory,
    pods_path,
    use_bench_profiles,
)
from bench.results import Section
from openblox.client import Client

PRODUCES = ["memory", "scaling"]
TITLES = {
    "memory": "Host memory per idle sandbox at 1, 10 and 50 sandboxes",
    "scaling": "Scaling: create latency and operator cost from 1 to N live sandboxes",
}
MIB = 2**20
MEMORY_POINTS = (1, 10, 50)
CHECKPOINTS = (1, 10, 25, 50, 75, 100, 150, 200, 250, 300)
# Leave the other sessions on this machine room to work.
MIN_AVAILABLE = 3 * 2**30
CREATE_TIMEOUT = 300.0
# bench-idle boots throttled (its CPU limit is the kubelet's 10m minimum), so many at a
# time: the node's CPU is not what limits them.
FILL_CONCURRENCY = 20
# Creates that may fail (and be retried under a new name) before the ramp gives up.
MAX_FAILURES = 3
# A bench-idle pod's CPU and memory requests: the profile's plus the gvisor RuntimeClass
# overhead (5m, 32Mi).
IDLE_POD_CPU_M = 15
IDLE_POD_MEMORY_MIB = 96


def _memory_snapshot(namespace: str, names: set[str] | None = None) -> dict[str, dict[str, Any]]:
    pods = node_pods(namespace)
    if names is not None:
        pods = {k: v for k, v in pods.items() if k in names}
    return pod_memory(pods)


def baselines(
    ctx: Any, memory: Section, count: int, docker_counts: list[int]
) -> tuple[dict[str, list[float]], dict[int, dict[str, Any]]]:
    """PSS per runc pod, `count` of them on their own; and per docker runsc container, at
    each of docker_counts, so each count of Sandboxes has Docker at the same count."""
    kube: Kube = ctx.kube
    found: dict[str, list[float]] = {}
    namespace = make_namespace(kube, f"obx-bench-mem-pods-{ctx.run_id}", sandboxes=False)
    with WatchRecorder(kube, namespace, "pods") as watch:
        names = [f"runc-{i}" for i in range(count)]
        for name in names:
            kube.request("POST", pods_path(namespace), bare_pod(name, None, kind="mem"))
        for name in names:
            watch.wait(name, "ready", 180, fail="failed")
        time.sleep(ctx.seconds(5.0, 1.0))
        per_pod = _memory_snapshot(namespace)
        found["runc"] = [m["pss"] / MIB for m in per_pod.values()]
        found["runc_cgroup"] = [m["cgroup"].get("working_set", 0) / MIB for m in per_pod.values()]
    delete_namespace(kube, namespace, wait=180)

    docker = docker_mod.measure_idle(ctx, memory, "mem", docker_counts, memory="64m", cpus="0.1")
    return found, docker


class Ramp:
    def __init__(self, ctx: Any, scaling: Section | None) -> None:
        self.ctx = ctx
        self.kube: Kube = ctx.kube
        self.scaling = scaling
        self.namespace = make_namespace(self.kube, f"obx-bench-scale-{ctx.run_id}", sandboxes=True)
        self.client = Client(self.namespace, kubeconfig=env.KUBECONFIG)
        self.sandboxes = WatchRecorder(self.kube, self.namespace, "sandboxes")
        self.pods = WatchRecorder(self.kube, self.namespace, "pods")
        self.live: list[str] = []
        self.lock = threading.Lock()
        self.latencies: list[tuple[int, float, str]] = []  # (live before, ms, probe|fill)
        self.failures: list[str] = []
        self.reserve_cpu: int = ctx.args.reserve_cpu
        self.cpu_full: float | None = None
        self.names = itertools.count()

    def close(self) -> float | None:
        self.sandboxes.close()
        self.pods.close()
        return delete_namespace(self.kube, self.namespace, wait=600)

    def create(self, name: str, kind: str) -> bool:
        """One Sandbox: a `fill` one stays (bench-idle); a `probe` one is deleted again."""
        with self.lock:
            live_before = len(self.live)
        profile = IDLE_PROFILE if kind == "fill" else SMALL_PROFILE
        started = time.monotonic()
        try:
            self.client.create(profile, name=name, timeout=CREATE_TIMEOUT)
        except Exception as error:
            detail = self.pods.detail.get(name, "")
            with contextlib.suppress(Exception):
                events = self.kube.get(
                    f"/api/v1/namespaces/{self.namespace}/events",
                    fieldSelector=f"involvedObject.name={name}",
                )["items"]
                detail += " events: " + "; ".join(
                    f"{e['reason']}: {e['message'][:160]}" for e in events[-4:]
                )
            self.failures.append(f"{name}: {type(error).__name__}: {error} {detail}".strip())
            with contextlib.suppress(Exception):
                self.client.delete(name)
            return False
        elapsed = (time.monotonic() - started) * 1000
        with self.lock:
            if kind == "fill":
                self.live.append(name)
            self.latencies.append((live_before, elapsed, kind))
        if kind == "probe":
            self.client.delete(name)
            with contextlib.suppress(TimeoutError):
                self.pods.wait(name, "deleted", 120)
        return True

    def fill(self, target: int, concurrency: int, deadline: float) -> bool:
        """Creates Sandboxes `concurrency` at a time until `target` live; False on trouble."""
        counter = [len(self.live)]
        ok = [True]
        in_flight = [0]
        guard = threading.Lock()

        def worker() -> None:
            while True:
                with guard:
                    if not ok[0] or counter[0] >= target or time.monotonic() > deadline:
                        return
                    if env.meminfo().get("MemAvailable", 0) < MIN_AVAILABLE:
                        ok[0] = False
                        return
                    # Pods not yet scheduled hold nothing yet: count the ones in flight.
                    free = node_capacity(self.kube)["cpu_free_m"] - in_flight[0] * IDLE_POD_CPU_M
                    if free - self.reserve_cpu < IDLE_POD_CPU_M:
                        self.cpu_full = free
                        ok[0] = False
                        return
                    index = next(self.names)
                    counter[0] += 1
                    in_flight[0] += 1
                created = self.create(f"f{index:03d}", "fill")
                with guard:
                    in_flight[0] -= 1
                    if not created:
                        counter[0] -= 1  # try for the same count again with a new name
                        if len(self.failures) >= MAX_FAILURES:
                            ok[0] = False

        threads = [threading.Thread(target=worker) for _ in range(concurrency)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return ok[0] and len(self.live) >= target


def run(ctx: Any, *sections: Section) -> None:
    by_name = {s.name: s for s in sections}
    memory = by_name.get("memory")
    scaling = by_name.get("scaling")
    use_bench_profiles(ctx)
    quick = ctx.quick
    target = (ctx.args.scale_max if scaling else max(MEMORY_POINTS)) if not quick else 3
    checkpoints = [c for c in CHECKPOINTS if c <= target]
    if target not in checkpoints:
        checkpoints.append(target)
    memory_points = [p for p in MEMORY_POINTS if p <= target] if not quick else [1, 3]
    checkpoints = sorted(set(checkpoints) | set(memory_points))
    probes = ctx.n(2, 1)
    ramp_budget = ctx.seconds(8 * 60.0, 240.0)

    base: dict[str, list[float]] = {}
    docker: dict[int, dict[str, Any]] = {}
    if memory:
        base, docker = baselines(ctx, memory, ctx.n(10, 2), memory_points)
        ctx.log(f"memory: runc pods {len(base.get('runc', []))}, docker at {sorted(docker)}")

    operator = Operator(ctx.kube)
    flows = FlowCounter(ctx.kube)
    flows.install()
    ctx.cleanup(flows.remove)
    available_start = env.meminfo()["MemAvailable"]
    operator_start = operator.sample()
    capacity = node_capacity(ctx.kube)
    ramp = Ramp(ctx, scaling)
    teardown: float | None = None
    points: list[dict[str, Any]] = []
    stopped = ""
    started = time.monotonic()
    deadline = started + ramp_budget
    try:
        for checkpoint in checkpoints:
            if not ramp.fill(checkpoint, FILL_CONCURRENCY, deadline):
                stopped = _why_stopped(ramp, deadline)
                break
            point = measure(ctx, ramp, operator, flows, available_start)
            for index in range(probes):
                if not ramp.create(f"p{checkpoint:03d}-{index}", "probe"):
                    break
            points.append(point)
            ctx.log(
                f"scaling: {point['live']} live, operator RSS {point['operator_rss_mib']:.0f} MiB, "
                f"sandbox PSS {point['pss_mean_mib']:.1f} MiB, "
                f"available {point['available_gib']:.1f} GiB"
            )
    finally:
        ramp_seconds = time.monotonic() - started
        live = len(ramp.live)
        teardown = ramp.close()

    if memory:
        record_memory(memory, points, memory_points, base, docker)
        record_parts(memory, points, memory_points, docker)
    if scaling:
        record_scaling(
            scaling, ramp, points, operator_start, stopped, live, ramp_seconds, teardown, target
        )
        record_caps(scaling, capacity, ramp.reserve_cpu)
    if not points:
        # Nothing was measured: the tables above say why, and the run must not read "ok".
        for section in (memory, scaling):
            if section is not None:
                section.status = "failed"
                section.error = f"no checkpoint was reached: {stopped or 'see the notes'}"


def measure(
    ctx: Any, ramp: Ramp, operator: Operator, flows: FlowCounter, available_start: int
) -> dict[str, Any]:
    time.sleep(ctx.seconds(5.0, 1.0))  # idle: let the last creates' work finish
    window = ctx.seconds(8.0, 2.0)
    first = operator.sample()
    requests_before = flows.read()
    time.sleep(window)
    last = operator.sample()
    requests_after = flows.read()
    elapsed = last["at"] - first["at"]
    per_pod = _memory_snapshot(ramp.namespace, set(ramp.live))
    parts = memory_parts.mean(
        [memory_parts.breakdown(m["pids"], m["extra"]) for m in per_pod.values()]
    )
    pss = [m["pss"] / MIB for m in per_pod.values()]
    pss_kernel = [m["pss_kernel"] / MIB for m in per_pod.values()]
    working = [m["cgroup"].get("working_set", 0) / MIB for m in per_pod.values()]
    rss = [m["rss"] / MIB for m in per_pod.values()]
    available = env.meminfo()["MemAvailable"]
    live = len(ramp.live)
    return {
        "live": live,
        "pods_measured": len(per_pod),
        "pss": pss,
        "pss_kernel": pss_kernel,
        "rss": rss,
        "working_set": working,
        "pss_mean_mib": statistics.fmean(pss) if pss else 0.0,
        "parts": parts,
        "available_gib": available / 2**30,
        "available_drop_per_sandbox_mib": (available_start - available) / MIB / live,
        "operator_rss_mib": last["rss"] / MIB,
        "operator_cpu_percent": (last["cpu_seconds"] - first["cpu_seconds"]) / elapsed * 100,
        "operator_api_per_s": (sum(requests_after.values()) - sum(requests_before.values()))
        / elapsed,
        "load": env.loadavg(),
    }


def _why_stopped(ramp: Ramp, deadline: float) -> str:
    available = env.meminfo().get("MemAvailable", 0)
    if ramp.cpu_full is not None:
        return (
            f"the node's CPU requests were full at {len(ramp.live)} live: "
            f"{ramp.cpu_full:.0f}m free, and the harness leaves {ramp.reserve_cpu}m for other "
            f"users (each bench-idle pod requests {IDLE_POD_CPU_M}m)"
        )
    if len(ramp.failures) >= MAX_FAILURES:
        return f"{len(ramp.failures)} creates failed by {len(ramp.live)} live: {ramp.failures[-1]}"
    if available < MIN_AVAILABLE:
        return (
            f"host MemAvailable fell to {available / 2**30:.1f} GiB at {len(ramp.live)} live "
            f"(the harness stops at {MIN_AVAILABLE / 2**30:.0f} GiB to leave room for others)"
        )
    if time.monotonic() > deadline:
        return f"the ramp's time budget ran out at {len(ramp.live)} live"
    return f"stopped at {len(ramp.live)} live"


def record_memory(
    memory: Section,
    points: list[dict[str, Any]],
    wanted: list[int],
    base: dict[str, list[float]],
    docker: dict[int, dict[str, Any]],
) -> None:
    if base.get("runc"):
        memory.figure(
            "memory.pss.runc_pod",
            f"host PSS per idle bare runc pod ({len(base['runc'])} running)",
            "MiB",
            base["runc"],
            group="pss",
            group_title="Host memory (PSS) per idle sandbox",
            label="bare runc pod (shim + pause + sleep)",
        )
    for count, measured in sorted(docker.items()):
        memory.figure(
            f"memory.pss.docker_runsc.{count}",
            f"host PSS per idle docker runsc container (64m, 0.1 CPU), {count} running",
            "MiB",
            measured["pss"],
            floor="memory.pss.runc_pod" if base.get("runc") else None,
            group="pss",
            label=f"docker run --runtime runsc (openblox flags), {count} running",
        )
    rows = []
    for point in points:
        if point["live"] not in wanted:
            continue
        live = point["live"]
        memory.figure(
            f"memory.pss.sandbox.{live}",
            f"host PSS per idle Sandbox, {live} running",
            "MiB",
            point["pss"],
            baseline=f"memory.pss.docker_runsc.{live}" if live in docker else None,
            floor="memory.pss.runc_pod" if base.get("runc") else None,
            group="pss",
            label=f"Sandbox (gVisor), {live} running",
            headline=True,
            notes="openblox reports 41 MiB",
        )
        memory.figure(
            f"memory.working_set.sandbox.{live}",
            f"pod memory cgroup working set per idle Sandbox, {live} running",
            "MiB",
            point["working_set"],
        )
        memory.figure(
            f"memory.available_drop.sandbox.{live}",
            f"drop in host MemAvailable per Sandbox, {live} running (noisy: shared host)",
            "MiB",
            value=point["available_drop_per_sandbox_mib"],
        )
        docker_pss = (docker.get(live) or {}).get("pss")
        docker_kernel = (docker.get(live) or {}).get("pss_kernel")
        rows.append(
            [
                live,
                round(statistics.fmean(point["pss"]), 1) if point["pss"] else None,
                round(statistics.fmean(docker_pss), 1) if docker_pss else None,
                _kernel_pair(point.get("pss_kernel"), docker_kernel),
                round(statistics.fmean(point["rss"]), 1) if point["rss"] else None,
                round(statistics.fmean(point["working_set"]), 1) if point["working_set"] else None,
                round(point["available_drop_per_sandbox_mib"], 1),
            ]
        )
    memory.table(
        "Mean per idle Sandbox",
        [
            "Sandboxes",
            "PSS MiB (shim, Sentry, stubs)",
            "docker runsc PSS MiB, same count",
            "kernel PSS MiB, Sandbox / docker (shared with other sandboxes on the host)",
            "RSS MiB (double-counts shared pages)",
            "pod cgroup working set MiB",
            "MemAvailable drop / N, MiB",
        ],
        rows,
    )
    memory.notes.append(
        "PSS sums /proc/<pid>/smaps_rollup over every process under the pod's containerd "
        "shims (gVisor: one shim per pod and runsc-sandbox with its systrap stub processes; "
        "no gofer, as both containers are served from EROFS images: docs/adr/0012 to 0014), "
        "so shared pages (the runsc binary) are split between sandboxes instead of counted "
        "in each. The pages of the sandbox software's own files (the runsc and shim "
        "binaries, the EROFS rootfs images) are split among the sandboxes measured only "
        "(bench/page_share.py, from pagemap and kpagecount): the kernel's PSS also splits "
        "them with sandboxes outside the measurement (other Sandboxes on the node, kind's "
        "node containers and their shims under the same dockerd), which makes either side "
        "look cheaper the more of those run; the kernel's figure is in its own column. "
        "Docker's containers are measured the same way, at the same counts, after "
        "the Sandboxes' runc baseline and before the ramp. The cgroup "
        "working set counts the Sentry's memory file (guest memory, tmpfs) but not the "
        "shims, which run outside the pod cgroup."
    )


def _kernel_pair(sandbox: list[float] | None, docker: list[float] | None) -> str:
    def mean(values: list[float] | None) -> str:
        return f"{statistics.fmean(values):.1f}" if values else "-"

    return f"{mean(sandbox)} / {mean(docker)}"


def record_parts(
    memory: Section,
    points: list[dict[str, Any]],
    wanted: list[int],
    docker: dict[int, dict[str, Any]],
) -> None:
    """Per process role, what one idle Sandbox and one docker runsc container cost, the
    same number of each running."""
    for point in points:
        live = point["live"]
        if live not in wanted or live not in docker:
            continue
        memory.table(
            f"Where the memory of one idle Sandbox goes, {live} running, against one "
            f"docker runsc container ({live} running)",
            memory_parts.HEADER,
            memory_parts.table_rows(point["parts"], docker[live]["parts"]),
        )


def record_scaling(  # noqa: PLR0917
    scaling: Section,
    ramp: Ramp,
    points: list[dict[str, Any]],
    operator_start: dict[str, Any],
    stopped: str,
    live: int,
    ramp_seconds: float,
    teardown: float | None,
    target: int,
) -> None:
    probes = [(n, ms) for n, ms, kind in ramp.latencies if kind == "probe"]
    fills = [(n, ms) for n, ms, kind in ramp.latencies if kind == "fill"]
    counts = sorted({n for n, _ in probes})
    for count in counts:
        scaling.figure(
            f"scaling.create.at{count}",
            f"probe Sandbox (bench-small) create→Ready, one at a time, {count} idle live",
            "ms",
            [ms for n, ms in probes if n == count],
            baseline=f"scaling.create.at{counts[0]}" if count != counts[0] else None,
            headline=count == counts[-1] and len(counts) > 1,
            group="probes",
            group_title="Probe create→Ready against idle Sandboxes live",
            label=f"{count} live",
        )
    if fills:
        scaling.figure(
            "scaling.create.fill",
            f"bench-idle Sandbox create→Ready while filling, {FILL_CONCURRENCY} at a time "
            "(CPU limit 10m: boot throttled)",
            "ms",
            [ms for _, ms in fills],
        )
    if points:
        scaling.figure(
            "scaling.operator_rss.max",
            f"operator RSS with {points[-1]['live']} live Sandboxes",
            "MiB",
            value=points[-1]["operator_rss_mib"],
            extra_baseline_mib=operator_start["rss"] / MIB,
        )
        scaling.figure(
            "scaling.operator_rss.start",
            "operator RSS before the ramp",
            "MiB",
            value=operator_start["rss"] / MIB,
        )
        scaling.figure(
            "scaling.operator_rss.max_ratio",
            f"operator RSS with {points[-1]['live']} live / before",
            "x",
            value=points[-1]["operator_rss_mib"] / (operator_start["rss"] / MIB),
        )
    scaling.figure(
        "scaling.live.max",
        f"live Sandboxes reached (aim {target})",
        "sandboxes",
        value=live,
        higher_is_better=True,
        headline=True,
    )
    if teardown is not None:
        scaling.figure(
            "scaling.teardown",
            f"delete the namespace with {live} Sandboxes until it is gone",
            "s",
            value=teardown,
        )
    scaling.table(
        "At each checkpoint (idle, after the creates)",
        [
            "live",
            "mean PSS / sandbox MiB",
            "operator RSS MiB",
            "operator CPU % (idle window)",
            "operator API req/s",
            "host MemAvailable GiB",
            "load 1/5/15",
        ],
        [
            [
                p["live"],
                round(p["pss_mean_mib"], 1),
                round(p["operator_rss_mib"], 1),
                round(p["operator_cpu_percent"], 1),
                round(p["operator_api_per_s"], 2),
                round(p["available_gib"], 2),
                " / ".join(f"{x:.2f}" for x in p["load"]),
            ]
            for p in points
        ],
    )
    scaling.series["latency"] = {
        "title": "Sandbox create→Ready against live Sandboxes",
        "xlabel": "live Sandboxes when the create started",
        "ylabel": "ms",
        "lines": {
            "probe, bench-small (one at a time)": [[n, ms] for n, ms in probes],
            f"fill, bench-idle ({FILL_CONCURRENCY} at a time)": [[n, ms] for n, ms in fills],
        },
        "styles": {
            "probe, bench-small (one at a time)": "o",
            f"fill, bench-idle ({FILL_CONCURRENCY} at a time)": ".",
        },
        "logy": True,
    }
    scaling.series["cost"] = {
        "title": "Operator and host against live Sandboxes",
        "xlabel": "live Sandboxes",
        "ylabel": "MiB / %",
        "lines": {
            "operator RSS (MiB)": [[p["live"], p["operator_rss_mib"]] for p in points],
            "operator CPU, idle window (% of a core)": [
                [p["live"], p["operator_cpu_percent"]] for p in points
            ],
            "mean PSS per sandbox (MiB)": [[p["live"], p["pss_mean_mib"]] for p in points],
        },
    }
    scaling.series["host"] = {
        "title": "Host MemAvailable against live Sandboxes",
        "xlabel": "live Sandboxes",
        "ylabel": "GiB",
        "lines": {"MemAvailable (GiB)": [[p["live"], p["available_gib"]] for p in points]},
    }
    scaling.notes.append(
        f"Ramp took {ramp_seconds:.0f} s; "
        + (f"it stopped early: {stopped}." if stopped else f"it reached {live} live Sandboxes.")
    )
    if ramp.failures:
        scaling.notes.append("failed creates: " + "; ".join(ramp.failures[:5]))


def record_caps(scaling: Section, capacity: dict[str, float], reserve: int) -> None:
    """Where this node tops out for bench-idle Sandboxes, resource by resource."""
    cpu = capacity["cpu_allocatable_m"]
    memory = capacity["memory_allocatable_mib"]
    rows = [
        [
            "CPU requests (requests == limits; 10m + 5m overhead each)",
            f"{cpu:.0f}m allocatable",
            int(cpu // IDLE_POD_CPU_M),
            int(max(0.0, capacity["cpu_free_m"] - reserve) // IDLE_POD_CPU_M),
        ],
        [
            "memory requests (64Mi + 32Mi overhead each)",
            f"{memory:,.0f} MiB allocatable",
            int(memory // IDLE_POD_MEMORY_MIB),
            int(capacity["memory_free_mib"] // IDLE_POD_MEMORY_MIB),
        ],
        ["kubelet maxPods", f"{capacity['pods_max']:.0f}", capacity["pods_max"], "-"],
        ["pod IPs (/22 node CIDR)", "1,022", 1022, "-"],
    ]
    scaling.table(
        "Where this node tops out for bench-idle Sandboxes",
        ["limit", "node", "on an empty node", "at the start of this run (after reserve)"],
        rows,
    )
    scaling.notes.append(
        f"At the start of the ramp {capacity['cpu_free_m']:.0f}m of CPU requests were free "
        f"({cpu - capacity['cpu_free_m']:.0f}m held by {capacity['pods']:.0f} running pods, "
        f"most of them other sessions'); the ramp leaves {reserve}m free for them "
        "(--reserve-cpu)."
    )
