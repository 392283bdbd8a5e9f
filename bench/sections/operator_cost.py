"""The operator's own cost: API requests per Sandbox lifecycle, memory at 0 / 100 / 1,000
Sandboxes, and one reaper pass over 10,000 Sandboxes.

A thousand pods cannot run on this node, so the 100 and 1,000 are Sandboxes that name a
profile whose RuntimeClass does not exist: each is reconciled (profile resolved, runtime
looked up, Event written, status patched) to Ready=False/RuntimeUnavailable and gets no
pod. That is the operator's memory for the objects, without the node's cost of pods.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

from bench import env
from bench.cluster_side import (
    BENCH_LABEL,
    NOPOD_PROFILE,
    SMALL_PROFILE,
    FlowCounter,
    Kube,
    Operator,
    WatchRecorder,
    delete_namespace,
    make_namespace,
    sandboxes_path,
    use_bench_profiles,
)
from bench.results import Section
from openblox.client import Client
from openblox.transport import ApiError, is_conflict

TITLES = {"operator": "Operator: API requests per lifecycle, RSS at 0/100/1,000 Sandboxes, reaper"}
MIB = 2**20
# The operator's memory limit is 256Mi: stop adding Sandboxes well before an OOM kill
# would restart it under everyone else's tests.
RSS_ABORT = 200 * MIB


def run(ctx: Any, section: Section) -> None:
    reaper_pass(ctx, section)
    use_bench_profiles(ctx)
    operator = Operator(ctx.kube)
    namespace = make_namespace(ctx.kube, f"obx-bench-op-life-{ctx.run_id}", sandboxes=True)
    ctx.cleanup(delete_namespace, ctx.kube, namespace)
    flows = FlowCounter(ctx.kube)
    flows.install(namespace)
    ctx.cleanup(flows.remove)
    time.sleep(2)  # the API server picks new FlowSchemas up asynchronously
    requests_per_lifecycle(ctx, section, namespace, flows)
    memory_at_scale(ctx, section, operator, flows)


# --------------------------------------------------------------------------- reaper


def reaper_pass(ctx: Any, section: Section) -> None:
    """One pass of the reaper's pure part over 10,000 Sandboxes, in this process."""
    from openblox.controller.deadlines import Deadlines
    from openblox.controller.profile_store import ProfileStore
    from openblox.controller.reaper import Reaper
    from openblox.controller.requeue import Requeue, Resyncs
    from openblox.controller.sandbox_cache import SandboxCache
    from openblox.lifetime.reaping import find_expired
    from openblox.models import parse_sandbox

    count = 10_000
    now = datetime.now(UTC)
    store = ProfileStore()
    store.update(
        {
            "code-exec": "image: x/y:1\nruntimeClassName: gvisor\n"
            "lifetime: {idleTimeoutSeconds: 900, maxAgeSeconds: 3600}\n",
            "short": "image: x/y:1\nruntimeClassName: gvisor\n"
            "lifetime: {idleTimeoutSeconds: 60, maxAgeSeconds: 600}\n",
        }
    )
    bodies = []
    for index in range(count):
        created = now - timedelta(seconds=index % 3000)
        metadata: dict[str, Any] = {
            "name": f"sbx-{index:05d}",
            "namespace": f"team-{index % 50}",
            "uid": f"00000000-0000-0000-0000-{index:012d}",
            "generation": 1,
            "creationTimestamp": created.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "resourceVersion": str(1000 + index),
        }
        if index % 2:
            metadata["annotations"] = {
                "openblox.sh/last-activity": (created + timedelta(seconds=30)).strftime(
                    "%Y-%m-%dT%H:%M:%SZ"
                )
            }
        spec: dict[str, Any] = {"profile": "code-exec" if index % 4 else "short"}
        if index % 7 == 0:
            spec["maxAgeSeconds"] = 1800
        bodies.append(
            {
                "apiVersion": "openblox.sh/v1alpha1",
                "kind": "Sandbox",
                "metadata": metadata,
                "spec": spec,
                "status": {
                    "observedGeneration": 1,
                    "conditions": [
                        {"type": "Ready", "status": "True", "reason": "Ready", "message": ""}
                    ],
                    "podName": metadata["name"],
                },
            }
        )
    started = time.perf_counter()
    parsed = [parse_sandbox(body) for body in bodies]
    parse_ms = (time.perf_counter() - started) * 1000
    cache = SandboxCache()
    started = time.perf_counter()
    for body in bodies:
        cache.upsert(body)
    upsert_ms = (time.perf_counter() - started) * 1000
    profiles = store.snapshot()
    passes = []
    expired = 0
    for _ in range(ctx.n(20, 3)):
        started = time.perf_counter()
        expired = len(list(find_expired(parsed, profiles, now)))
        passes.append((time.perf_counter() - started) * 1000)
    # reap_once deletes what expired through the API; time the pass with nothing expired.
    reaper_none = Reaper(
        None,  # type: ignore[arg-type]
        cache,
        store,
        reconcile=None,  # type: ignore[arg-type]
        requeue=Requeue(),
        deadlines=Deadlines(),
        resyncs=Resyncs(),
        events=None,  # type: ignore[arg-type]
        election=None,  # type: ignore[arg-type]
        clock=lambda: now - timedelta(days=1),
    )
    full = []
    for _ in range(ctx.n(20, 3)):
        started = time.perf_counter()
        reaper_none.reap_once()
        full.append((time.perf_counter() - started) * 1000)
    section.figure(
        "operator.reaper.find_expired_10k",
        f"reaper pass over {count:,} Sandboxes: find_expired (pure; {expired:,} expired)",
        "ms",
        passes,
        notes="target < 1,000 ms",
        headline=True,
    )
    section.figure(
        "operator.reaper.reap_once_10k",
        f"reaper pass over {count:,} Sandboxes: Reaper.reap_once on a full cache, none due",
        "ms",
        full,
    )
    section.figure(
        "operator.reaper.parse_10k",
        f"parse {count:,} Sandbox bodies (once per watch event, not per pass)",
        "ms",
        value=parse_ms,
    )
    section.figure(
        "operator.reaper.cache_upsert_10k",
        f"SandboxCache.upsert of {count:,} bodies (the watch's cost to keep the cache)",
        "ms",
        value=upsert_ms,
    )


# --------------------------------------------------------------------------- API requests


class CountingClient(Client):
    """The openblox client, counting the API requests it makes."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls = 0
        api = self._io.api
        send, watch = api.send, api.watch

        def counted_send(*a: Any, **k: Any) -> Any:
            self.calls += 1
            return send(*a, **k)

        def counted_watch(*a: Any, **k: Any) -> Any:
            self.calls += 1
            return watch(*a, **k)

        api.send = counted_send  # type: ignore[method-assign]
        api.watch = counted_watch  # type: ignore[method-assign]


def requests_per_lifecycle(ctx: Any, section: Section, namespace: str, flows: FlowCounter) -> None:
    """Requests in the lifecycle's namespace are counted exactly; cluster-scoped ones
    (namespaces, runtimeclasses) and those elsewhere are net of the idle rate, which other
    sessions' tests make noisy."""
    kube: Kube = ctx.kube
    client = CountingClient(namespace, kubeconfig=env.KUBECONFIG)
    # Warm the namespace (the operator prepares each namespace once: PSA labels, policy).
    with WatchRecorder(kube, namespace, "pods") as pods:
        warm = client.create(SMALL_PROFILE, name="warm", timeout=180)
        warm.delete()
        pods.wait("warm", "deleted", 120)
        idle_window = ctx.seconds(15.0, 3.0)
        before = flows.read()
        time.sleep(idle_window)
        after = flows.read()
        idle_rate = {k: (after[k] - before[k]) / idle_window for k in after}
        per_cycle: list[dict[str, float]] = []
        client_calls: list[int] = []
        for index in range(ctx.n(5, 1)):
            name = f"life-{index}"
            client.calls = 0
            start_counts = flows.read()
            started = time.monotonic()
            sandbox = client.create(SMALL_PROFILE, name=name, timeout=180)
            sandbox.delete()
            pods.wait(name, "deleted", 120)
            time.sleep(3)  # trailing reconciles from the pod's and Sandbox's deletion
            elapsed = time.monotonic() - started
            end_counts = flows.read()
            client_calls.append(client.calls)
            per_cycle.append(
                {
                    k: end_counts[k]
                    - start_counts[k]
                    - (0 if k.startswith("ns-") else idle_rate[k] * elapsed)
                    for k in end_counts
                }
            )
    exact = [sum(v for k, v in cycle.items() if k.startswith("ns-")) for cycle in per_cycle]
    net = [sum(v for k, v in cycle.items() if not k.startswith("ns-")) for cycle in per_cycle]
    section.figure(
        "operator.api_requests_per_lifecycle.namespaced",
        "operator's API requests per Sandbox create→Ready→delete, in its namespace (exact)",
        "requests",
        exact,
        headline=True,
        notes="plus 1 pods/exec boundary probe, which flow control does not count",
    )
    section.figure(
        "operator.api_requests_per_lifecycle.cluster",
        "operator's cluster-scoped API requests per lifecycle (net of the idle rate; noisy)",
        "requests",
        net,
    )
    section.figure(
        "operator.client_requests_per_lifecycle",
        "client's API requests per create→Ready→delete (create, watch, delete)",
        "requests",
        client_calls,
    )
    rows = []
    for key in sorted(per_cycle[0]):
        values = [cycle[key] for cycle in per_cycle]
        rows.append(
            [
                key.removeprefix("ns-")
                + (
                    " (in namespace, exact)"
                    if key.startswith("ns-")
                    else " (cluster-scoped or elsewhere, net)"
                ),
                round(statistics.median(values), 1),
                round(idle_rate[key] * 60, 1),
            ]
        )
    section.table(
        "Operator requests per lifecycle by resource (median; counted by the API server "
        "per FlowSchema matching only the operator's ServiceAccount)",
        ["resource", "requests per lifecycle", "idle requests per minute (whole cluster)"],
        [r for r in rows if r[1] or r[2]],
    )


# --------------------------------------------------------------------------- memory at scale


def _create_many(kube: Kube, namespace: str, start: int, stop: int) -> list[str]:
    def one(index: int) -> str:
        name = f"n{index:04d}"
        body = {
            "apiVersion": "openblox.sh/v1alpha1",
            "kind": "Sandbox",
            "metadata": {"name": name, "labels": {BENCH_LABEL: "nopod"}},
            "spec": {"profile": NOPOD_PROFILE},
        }
        for attempt in range(5):
            try:
                kube.request("POST", sandboxes_path(namespace), body)
                break
            except ApiError as error:
                if is_conflict(error):
                    break
                if attempt == 4:
                    raise
                time.sleep(1)
        return name

    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(one, range(start, stop)))


def _steady_sample(operator: Operator, flows: FlowCounter, window: float) -> dict[str, Any]:
    first = operator.sample()
    requests_before = flows.read()
    reconciles_before = operator.metrics()
    time.sleep(window)
    last = operator.sample()
    requests_after = flows.read()
    reconciles_after = operator.metrics()
    elapsed = last["at"] - first["at"]

    def reconciles(sample: dict[str, float]) -> float | None:
        values = [v for k, v in sample.items() if k.startswith("openblox_reconciles_total{")]
        return sum(values) if values else None

    before, after = reconciles(reconciles_before), reconciles(reconciles_after)
    return {
        "rss": last["rss"],
        "pss": last["pss"],
        "working_set": last["cgroup"].get("working_set"),
        "cpu_percent": (last["cpu_seconds"] - first["cpu_seconds"]) / elapsed * 100,
        "api_per_s": (sum(requests_after.values()) - sum(requests_before.values())) / elapsed,
        # Every trigger (watch events, requeues, resyncs): what settled Sandboxes cost.
        "reconciles_per_s": (after - (before or 0)) / elapsed if after is not None else None,
    }


def _cluster_sandboxes(kube: Kube) -> int:
    return len(kube.get("/apis/openblox.sh/v1alpha1/sandboxes").get("items", []))


def memory_at_scale(ctx: Any, section: Section, operator: Operator, flows: FlowCounter) -> None:
    kube: Kube = ctx.kube
    namespace = make_namespace(kube, f"obx-bench-op-scale-{ctx.run_id}", sandboxes=True)
    ctx.cleanup(delete_namespace, kube, namespace)
    steps = [0, 100, 1000] if not ctx.quick else [0, 10, 30]
    window = ctx.seconds(10.0, 3.0)
    restarts_before = operator.restarts()
    rows = []
    lines: dict[str, list[list[float]]] = {
        "RSS (MiB)": [],
        "CPU while settled (% of a core)": [],
        "API requests/s while settled": [],
    }
    created = 0
    stopped: str | None = None
    with WatchRecorder(kube, namespace, "sandboxes") as watch:
        for target in steps:
            if target > created:
                started = time.monotonic()
                names = _create_many(kube, namespace, created, target)
                created = target
                # Settled: every one of them carries its RuntimeUnavailable condition.
                deadline = time.monotonic() + 600
                while watch.count("condition", set(names)) < len(names):
                    if time.monotonic() > deadline:
                        stopped = f"the operator had not settled {target} Sandboxes in 600 s"
                        break
                    rss = operator.sample()["rss"]
                    if rss > RSS_ABORT or operator.restarts() != restarts_before:
                        stopped = (
                            f"stopped at {target}: operator RSS {rss / MIB:.0f} MiB or a "
                            "restart (limit 256Mi)"
                        )
                        break
                    time.sleep(1)
                settle_s = time.monotonic() - started
                ctx.log(f"operator: {target} Sandboxes settled in {settle_s:.0f}s")
            else:
                settle_s = 0.0
            time.sleep(ctx.seconds(5.0, 1.0))
            sample = _steady_sample(operator, flows, window)
            total = _cluster_sandboxes(kube)
            rows.append(
                [
                    target,
                    total,
                    round(sample["rss"] / MIB, 1),
                    round(sample["pss"] / MIB, 1),
                    round((sample["working_set"] or 0) / MIB, 1),
                    round(sample["cpu_percent"], 1),
                    round(sample["api_per_s"], 1),
                    sample["reconciles_per_s"] and round(sample["reconciles_per_s"], 1),
                    round(settle_s, 1),
                ]
            )
            lines["RSS (MiB)"].append([target, sample["rss"] / MIB])
            lines["CPU while settled (% of a core)"].append([target, sample["cpu_percent"]])
            lines["API requests/s while settled"].append([target, sample["api_per_s"]])
            section.figure(
                f"operator.rss.{target}",
                f"operator RSS with {target} benchmark Sandboxes ({total} in the cluster)",
                "MiB",
                value=sample["rss"] / MIB,
                baseline="operator.rss.0" if target else None,
                headline=target in (0, steps[-1]),
                notes="target < 100 MiB at 1,000" if target == 1000 else "",
            )
            if stopped:
                break
    if stopped:
        section.notes.append(stopped)
    # Tear down and see whether the memory comes back.
    started = time.monotonic()
    with contextlib.suppress(ApiError):
        kube.request("DELETE", sandboxes_path(namespace))
    while kube.get(sandboxes_path(namespace)).get("items"):
        if time.monotonic() - started > 300:
            break
        time.sleep(1)
    time.sleep(ctx.seconds(10.0, 2.0))
    after = operator.sample()
    section.figure(
        "operator.rss.after_delete",
        f"operator RSS after deleting the {created} Sandboxes",
        "MiB",
        value=after["rss"] / MIB,
        baseline="operator.rss.0",
    )
    section.table(
        "Operator with N RuntimeUnavailable Sandboxes (no pods), sampled once settled",
        [
            "benchmark Sandboxes",
            "Sandboxes in cluster",
            "RSS MiB",
            "PSS MiB",
            "cgroup working set MiB",
            "CPU % of a core",
            "API req/s",
            "reconciles/s (all triggers)",
            "seconds to settle",
        ],
        rows,
    )
    section.series["rss"] = {
        "title": "Operator cost against Sandboxes it holds (RuntimeUnavailable, no pods)",
        "xlabel": "Sandboxes",
        "ylabel": "MiB / % / req/s",
        "lines": lines,
    }
    section.notes.append(
        "Sandboxes in the cluster include other sessions' (tests running at the same time). "
        "RSS and PSS are summed over the operator container's processes (from /proc); the "
        "working set is its memory cgroup's usage less inactive file pages, as the kubelet "
        "counts it. Watch events drive the reconcile; unready Sandboxes are re-reconciled "
        "only when something they wait for changes (profiles, a RuntimeClass, a namespace's "
        "labels) and by a safety resync every 300 s, which for a settled Sandbox makes no API "
        "request (Namespace, RuntimeClass, policy and pod come from watches)."
    )
