"""The control plane at scale: 10,000 Sandboxes on 100 simulated nodes (kwok), then pools
in 100 namespaces, then an expiry wave.

Pods on simulated nodes never run (bench/kwok.py), so this measures the control plane
only: how fast the operator turns Sandboxes into pods, what it costs in memory and CPU
with that many, what the API server and etcd pay, how fast the reaper deletes a wave of
expired Sandboxes, and how the pool keeper fills pools in 100 namespaces. It never
measures a sandbox's start, which the `create`, `pool` and `scaling` sections do.

Bounded: it stops adding Sandboxes when the operator's memory nears its limit, when it
restarts, when the operator falls too far behind, or when the section's time is up, and
it says which. Everything it made (namespaces, simulated nodes, their Leases, the
RuntimeClass, its pool and profile, kwok) is removed at the end, on failure and on
SIGINT/SIGTERM, and by `--cleanup`.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench import api_writes, kwok, node_cpu, procs
from bench.cluster_side import (
    BENCH_LABEL,
    SCALE_PROFILE,
    SCALE_RUNTIME_CLASS,
    Kube,
    Operator,
    delete_namespace,
    list_then_watch,
    make_namespace,
    patiently,
    profile_yaml,
    sandboxes_path,
    use_bench_profiles,
)
from bench.results import Section
from openblox.names import (
    LABEL_POOL,
    LABEL_SANDBOX,
    OPERATOR_NAMESPACE,
    POOLS_CONFIGMAP,
    PROFILES_CONFIGMAP,
)
from openblox.transport import ApiError, is_conflict

TITLES = {"scale": "Scale: 10,000 Sandboxes on 100 simulated nodes (control plane only)"}
MIB = 2**20
# The operator's memory limit is 256Mi (manifests/operator.yaml): stop adding Sandboxes
# before an OOM kill restarts it under everyone else's tests.
RSS_ABORT = 236 * MIB
# The section stops adding Sandboxes after this long, whatever it reached.
SECTION_SECONDS = 25 * 60
# Time left at the end for the pool, the expiry wave and the cleanup.
RESERVED_SECONDS = 9 * 60
# A step is over when every Sandbox has its pod, or when this long has passed without
# a new pod appearing (the operator is stuck, or it is behind for good).
STALL_SECONDS = 120.0
CREATE_THREADS = 16
WATCH_SECONDS = 300


class Arrivals:
    """One cluster-wide watch that stamps when each object first appeared and when it
    went, keyed by (namespace, key(object)); it counts its own reconnects."""

    def __init__(
        self, kube: Kube, path: str, selector: str, key: Callable[[Mapping[str, Any]], str]
    ) -> None:
        self._kube = kube
        self._path = path
        self._selector = selector
        self._key = key
        self.added: dict[tuple[str, str], float] = {}
        self.deleted: dict[tuple[str, str], float] = {}
        self.reconnects = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="arrivals")
        self._thread.start()
        if not self._ready.wait(60):
            raise RuntimeError(f"could not start a watch on {path}")

    def close(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        list_then_watch(
            self._kube,
            self._path,
            self._stop,
            self._seen,
            self._ready,
            params={"labelSelector": self._selector},
            reconnected=self._reconnected,
        )

    def _reconnected(self) -> None:
        self.reconnects += 1

    def _seen(self, kind: str, body: Mapping[str, Any]) -> None:
        at = time.monotonic()
        key = (str(body["metadata"].get("namespace")), self._key(body))
        with self._lock:
            if kind == "DELETED":
                self.deleted.setdefault(key, at)
            else:
                self.added.setdefault(key, at)

    def count_added(self, keys: set[tuple[str, str]]) -> int:
        with self._lock:
            return sum(1 for key in keys if key in self.added)

    def count_deleted(self, keys: set[tuple[str, str]]) -> int:
        with self._lock:
            return sum(1 for key in keys if key in self.deleted)


def _sandbox_of_pod(pod: Mapping[str, Any]) -> str:
    return str((pod["metadata"].get("labels") or {}).get(LABEL_SANDBOX) or "")


def _name_of(body: Mapping[str, Any]) -> str:
    return str(body["metadata"]["name"])


class Sampler:
    """The operator's memory and CPU, the API server's and etcd's, and the API server's
    request counters, read together."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.operator = Operator(kube)
        self.roles = node_cpu.roles(kube)
        if not self.roles:
            raise RuntimeError("the scale section reads the embedded cluster's processes")
        self.peak_rss = 0  # the Lease holder's, highest of every sample taken

    def restarts(self) -> tuple[int, str]:
        """Restarts of every operator replica together (the Lease may move with one), and
        why the last container to end ended (`OOMKilled`, an exit code)."""
        total, why, last = 0, "", ""
        for pod in self.operator.replicas():
            for status in (pod.get("status") or {}).get("containerStatuses") or []:
                total += int(status.get("restartCount", 0))
                ended = (status.get("lastState") or {}).get("terminated") or {}
                if ended.get("finishedAt", "") > last:
                    last = str(ended["finishedAt"])
                    why = str(ended.get("reason") or f"exit code {ended.get('exitCode')}")
        return total, why

    def operator_sample(self, wait: float = 120) -> dict[str, Any]:
        """The operator's sample, waiting out a replica that is restarting."""
        deadline = time.monotonic() + wait
        while True:
            try:
                sample: dict[str, Any] = self.operator.sample()
                self.peak_rss = max(self.peak_rss, int(sample["rss"]))
                return sample
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(2)

    def take(self) -> dict[str, Any]:
        operator = self.operator_sample()
        self.roles = node_cpu.roles(self.kube) or self.roles  # a replica may have restarted
        metrics = self.kube.text("/metrics")
        return {
            "at": time.monotonic(),
            "leader": tuple(operator["pids"]),
            "operator_rss": operator["rss"],
            "cpu": node_cpu.snapshot(self.roles),
            "apiserver_rss": procs.memory_of(self.roles["kube-apiserver"])["rss"],
            "etcd_rss": procs.memory_of(self.roles.get("etcd", []))["rss"],
            "writes": api_writes.parse_requests(metrics, api_writes.WRITE_VERBS),
            "watches": api_writes.parse_requests(metrics, frozenset({"WATCH"})),
        }


def _cpu_percent(before: dict[str, Any], after: dict[str, Any], role: str) -> str:
    """A role's CPU between two samples, as text: "n/a" when its process changed between
    them (a replica restarted, or the Lease moved), which makes the difference meaningless."""
    elapsed = float(after["at"] - before["at"])
    used = float(after["cpu"].get(role, 0.0) - before["cpu"].get(role, 0.0))
    if used < 0 or before.get("leader") != after.get("leader"):
        return "n/a"
    return f"{used / elapsed * 100:.0f}%"


def _sum(counts: dict[str, float], resources: tuple[str, ...]) -> float:
    return sum(v for k, v in counts.items() if k.split("/")[0].split(".")[0] in resources)


def run(ctx: Any, section: Section) -> None:
    kube: Kube = ctx.kube
    started = time.monotonic()
    nodes_wanted = ctx.n(ctx.args.scale_nodes, 10)
    namespaces_wanted = ctx.n(ctx.args.scale_namespaces, 5)
    sandboxes_wanted = ctx.n(ctx.args.scale_sandboxes, 200)
    section.notes.append(
        "Control plane only: pods are bound to simulated nodes (kwok) and never run; "
        f"{nodes_wanted} simulated nodes of 200 pods each, fenced off from real pods by "
        "a taint only the bench's RuntimeClass tolerates (bench/kwok.py)."
    )

    ctx.log("scale: building kwok (cached after the first time)")
    kwok.build()
    use_bench_profiles(ctx)
    sampler = Sampler(kube)
    run_id = ctx.run_id

    kwok.STATE.mkdir(parents=True, exist_ok=True)
    kubeconfig = kwok.write_credentials(kwok.STATE / run_id)
    config = kwok.write_config(kwok.STATE / run_id)
    ctx.cleanup(kwok.remove_nodes, kube, f"{kwok.NODE_LABEL}={run_id}")
    kwok.create(kube, "/apis/node.k8s.io/v1/runtimeclasses", kwok.runtime_class(run_id))
    simulator = kwok.Kwok(run_id)
    simulator.start_kwok(kubeconfig, config)
    ctx.cleanup(simulator.stop)

    names = [kwok.node_name(run_id, i) for i in range(nodes_wanted)]
    node_started = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        list(
            pool.map(
                lambda name: kwok.create(kube, "/api/v1/nodes", kwok.node_body(run_id, name)),
                names,
            )
        )
    leases = kwok.AgentLeases(kube, names)
    leases.start()
    ctx.cleanup(leases.stop)
    while kwok.ready_nodes(kube, run_id) < nodes_wanted:
        if time.monotonic() - node_started > 180:
            raise RuntimeError(
                f"kwok made {kwok.ready_nodes(kube, run_id)} of {nodes_wanted} nodes Ready "
                f"in 180 s: {simulator.tail()}"
            )
        time.sleep(1)
    section.figure(
        "scale.nodes",
        "simulated nodes Ready (kwok), with the ready label and an agent Lease each",
        "nodes",
        value=nodes_wanted,
        higher_is_better=True,
        headline=True,
        notes=f"all Ready {time.monotonic() - node_started:.0f} s after their creation",
    )

    namespaces = [
        make_namespace(kube, f"obx-bench-scale-{run_id}-{j:03d}", sandboxes=True)
        for j in range(namespaces_wanted)
    ]
    ctx.cleanup(_delete_namespaces, kube, namespaces)

    pods = Arrivals(kube, "/api/v1/pods", LABEL_SANDBOX, _sandbox_of_pod)
    sandboxes = Arrivals(
        kube, "/apis/openblox.sh/v1alpha1/sandboxes", f"{BENCH_LABEL}=scale", _name_of
    )
    ctx.cleanup(pods.close)
    ctx.cleanup(sandboxes.close)
    baseline = sampler.take()
    reached, stopped = _ramp(
        ctx,
        section,
        sampler,
        pods,
        namespaces=namespaces,
        target=sandboxes_wanted,
        started=started,
        baseline=baseline,
    )
    section.figure(
        "scale.sandboxes",
        "Sandboxes the operator held, each with its pod made",
        "Sandboxes",
        value=reached,
        higher_is_better=True,
        headline=True,
        notes=stopped or f"the target ({sandboxes_wanted}) was reached",
    )
    if stopped:
        section.notes.append(stopped)
    _pools(ctx, section, sampler, namespaces, run_id)
    _expiry_wave(ctx, section, sampler, sandboxes, pods=pods, count=reached)
    section.notes.append(
        f"agent Leases renewed {leases.renewals} times ({leases.failures} failed); the "
        f"bench's own watches reconnected {pods.reconnects + sandboxes.reconnects} times"
    )


def _delete_namespaces(kube: Kube, namespaces: list[str], wait: float = 600) -> None:
    """All at once, then until all are gone (kwok finishes their pods' deletions, so it
    must still run)."""
    for namespace in namespaces:
        delete_namespace(kube, namespace)
    deadline = time.monotonic() + wait
    for namespace in namespaces:
        left = max(deadline - time.monotonic(), 1.0)
        if delete_namespace(kube, namespace, wait=left) is None:
            raise RuntimeError(f"namespace {namespace} was still there after {wait:.0f} s")


def _create(kube: Kube, namespace: str, name: str) -> float:
    body = {
        "apiVersion": "openblox.sh/v1alpha1",
        "kind": "Sandbox",
        "metadata": {"name": name, "labels": {BENCH_LABEL: "scale"}},
        "spec": {"profile": SCALE_PROFILE},
    }
    for attempt in range(8):
        try:
            kube.request("POST", sandboxes_path(namespace), body)
            return time.monotonic()
        except ApiError as error:
            if is_conflict(error):
                return time.monotonic()
            if attempt == 7 or error.status not in (429, 500, 503, 504):
                raise
            time.sleep(0.5 * (attempt + 1))
    raise AssertionError("unreachable")


def _steps(target: int) -> list[int]:
    marks = [m for m in (250, 500, 1000, 2500, 5000, 7500, 10_000, 15_000, 20_000) if m < target]
    return [*marks, target]


def _ramp(
    ctx: Any,
    section: Section,
    sampler: Sampler,
    pods: Arrivals,
    *,
    namespaces: list[str],
    target: int,
    started: float,
    baseline: dict[str, Any],
) -> tuple[int, str | None]:
    kube = sampler.kube
    restarts, _ = sampler.restarts()
    created: dict[tuple[str, str], float] = {}
    rows: list[list[Any]] = []
    reached = 0
    stopped: str | None = None
    for step in _steps(target):
        if time.monotonic() - started > SECTION_SECONDS - RESERVED_SECONDS:
            stopped = f"stopped before {step}: the section's time for the ramp was up"
            break
        before = sampler.take()
        wanted = [(namespaces[i % len(namespaces)], f"s{i:05d}") for i in range(len(created), step)]
        step_started = time.monotonic()
        with ThreadPoolExecutor(CREATE_THREADS) as pool:
            stamps = list(pool.map(lambda key: _create(kube, *key), wanted))
        created.update(zip(wanted, stamps, strict=True))
        created_s = time.monotonic() - step_started
        keys = set(wanted)
        last_count, last_progress = -1, time.monotonic()
        rss = before["operator_rss"]
        while True:
            count = pods.count_added(keys)
            if count != last_count:
                last_count, last_progress = count, time.monotonic()
            if count == len(keys):
                break
            now_restarts, why = sampler.restarts()
            if now_restarts != restarts:
                stopped = (
                    f"stopped at {step}: an operator replica restarted ({why}) with "
                    f"{count} of this step's {len(keys)} pods made; the Lease holder's RSS was "
                    f"{rss / MIB:.0f} MiB a second before"
                )
                break
            rss = sampler.operator_sample()["rss"]
            if rss > RSS_ABORT:
                stopped = f"stopped at {step}: the operator's RSS reached {rss / MIB:.0f} MiB"
                break
            if time.monotonic() - last_progress > STALL_SECONDS:
                stopped = (
                    f"stopped at {step}: no new pod for {STALL_SECONDS:.0f} s, "
                    f"{len(keys) - count} of this step's Sandboxes without one"
                )
                break
            time.sleep(1)
        after = sampler.take()
        made = [pods.added[k] for k in keys if k in pods.added]
        lags = sorted((pods.added[k] - created[k]) * 1000 for k in keys if k in pods.added)
        span = (max(made) - step_started) if made else float("nan")
        with pods._lock:
            reached = sum(1 for k in created if k in pods.added)
        rows.append(
            [
                step,
                len(wanted),
                round(len(wanted) / created_s, 1),
                round(len(made) / span, 1) if made else 0,
                round(statistics.median(lags)) if lags else None,
                round(lags[int(0.99 * (len(lags) - 1))]) if lags else None,
                round(after["operator_rss"] / MIB, 1),
                _cpu_percent(before, after, node_cpu.LEADER),
                round(after["apiserver_rss"] / MIB),
                round(after["etcd_rss"] / MIB),
                round(_sum(api_writes.delta(before["watches"], after["watches"]), ("pods",))),
                round(_sum(api_writes.delta(before["watches"], after["watches"]), ("sandboxes",))),
            ]
        )
        ctx.log(f"scale: {reached} Sandboxes with pods ({rows[-1]})")
        if stopped:
            break
    section.table(
        "Ramp: each step creates Sandboxes as fast as the API server takes them "
        f"({CREATE_THREADS} threads) and waits until each has its pod",
        [
            "Sandboxes",
            "created in step",
            "creates/s",
            "pods made/s",
            "create→pod p50 ms",
            "create→pod p99 ms",
            "operator RSS MiB",
            "operator CPU, share of a core",
            "API server RSS MiB",
            "etcd RSS MiB",
            "pod WATCHes ended (each restarted)",
            "Sandbox WATCHes ended",
        ],
        rows,
    )
    if rows:
        last = rows[-1]
        section.figure(
            "scale.operator_rss_mib",
            f"operator RSS holding {reached} Sandboxes and their pods",
            "MiB",
            value=last[6],
            headline=True,
            notes=f"{baseline['operator_rss'] / MIB:.0f} MiB before the ramp; limit 256Mi",
        )
        throughput = [r[3] for r in rows if r[3]]
        if throughput:
            section.figure(
                "scale.pods_per_second",
                "pods the operator made per second while Sandboxes arrived (slowest step)",
                "pods/s",
                value=min(throughput),
                higher_is_better=True,
                headline=True,
                notes=f"steps: {', '.join(str(t) for t in throughput)}",
            )
    return reached, stopped


def _pools(
    ctx: Any, section: Section, sampler: Sampler, namespaces: list[str], run_id: str
) -> None:
    """A pool of one pod in each namespace, made while the Sandboxes are held."""
    kube = sampler.kube
    name = f"bench-scale-{run_id}"
    path = f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/configmaps/{POOLS_CONFIGMAP}"
    text = f"profile: {SCALE_PROFILE}\nnamespaces: [{', '.join(namespaces)}]\nsize: 1\n"
    pool_pods = Arrivals(kube, "/api/v1/pods", LABEL_POOL, _name_of)
    wanted = len(namespaces)

    def remove() -> None:
        patiently(
            kube.request,
            "PATCH",
            path,
            {"data": {name: None}},
            content_type="application/merge-patch+json",
        )

    ctx.cleanup(remove)
    before = sampler.take()
    started = time.monotonic()
    kube.request("PATCH", path, {"data": {name: text}}, content_type="application/merge-patch+json")
    while time.monotonic() - started < 180:
        with pool_pods._lock:
            made = len({ns for ns, _ in pool_pods.added if ns in set(namespaces)})
        if made >= wanted:
            break
        time.sleep(1)
    elapsed = time.monotonic() - started
    after = sampler.take()
    remove()
    pool_pods.close()
    section.figure(
        "scale.pool_fill_seconds",
        f"pools of one pod in {wanted} namespaces: time until each namespace has its pod",
        "s",
        value=elapsed,
        notes=f"{made} of {wanted} made; operator CPU "
        f"{_cpu_percent(before, after, node_cpu.LEADER)} of a core meanwhile",
    )


def _expiry_wave(
    ctx: Any,
    section: Section,
    sampler: Sampler,
    sandboxes: Arrivals,
    *,
    pods: Arrivals,
    count: int,
) -> None:
    """Every Sandbox of the bench's profile expires at once: the profile's max age is cut
    below their age, and the reaper deletes them on its next pass."""
    kube = sampler.kube
    keys = set(sandboxes.added)
    if not keys:
        return
    before = sampler.take()
    started = time.monotonic()
    short = profile_yaml(
        "10m", "64Mi", scratch="8Mi", runtime=SCALE_RUNTIME_CLASS, max_age_seconds=1
    )
    kube.request(
        "PATCH",
        f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/configmaps/{PROFILES_CONFIGMAP}",
        {"data": {SCALE_PROFILE: short}},
        content_type="application/merge-patch+json",
    )
    gone = 0
    last, last_progress = -1, time.monotonic()
    while time.monotonic() - started < 600:
        gone = sandboxes.count_deleted(keys)
        if gone != last:
            last, last_progress = gone, time.monotonic()
        if gone == len(keys) or time.monotonic() - last_progress > STALL_SECONDS:
            break
        sampler.operator_sample()
        time.sleep(1)
    after = sampler.take()
    times = sorted(sandboxes.deleted[k] - started for k in keys if k in sandboxes.deleted)
    pods_gone = len(pods.deleted)
    deletes = _sum(api_writes.delta(before["writes"], after["writes"]), ("sandboxes",))
    section.figure(
        "scale.expiry_wave_seconds",
        f"expiry wave: {count} Sandboxes expired at once, until the last was deleted",
        "s",
        value=times[-1] if times else float("nan"),
        notes=(
            f"{gone} of {len(keys)} deleted; first at {times[0]:.1f} s, half at "
            f"{times[len(times) // 2]:.1f} s; {deletes:.0f} Sandbox writes (deletes and "
            f"status) meanwhile; {pods_gone} pods gone by then; operator CPU "
            f"{_cpu_percent(before, after, node_cpu.LEADER)} of a core"
            if times
            else "none was deleted"
        ),
    )
    section.figure(
        "scale.operator_peak_rss_mib",
        "operator RSS, the highest sample of the run (ramp, pools and expiry wave)",
        "MiB",
        value=round(sampler.peak_rss / MIB, 1),
        headline=True,
        notes=(
            f"{after['operator_rss'] / MIB:.0f} MiB when the wave was over, with every "
            "Sandbox gone; limit 256Mi"
        ),
    )
    if times and len(times) > 1:
        section.figure(
            "scale.reaper_deletes_per_second",
            "Sandboxes the reaper deleted per second in the wave (first to last)",
            "Sandboxes/s",
            value=(len(times) - 1) / max(times[-1] - times[0], 1e-3),
            higher_is_better=True,
        )
