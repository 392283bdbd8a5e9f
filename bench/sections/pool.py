"""Warm claims: create→Ready of a Sandbox handed a pod from a warm pool, beside a cold
create of the same profile and `docker run --runtime runsc` in the same run.

- cold: the profile in a namespace no pool serves, one at a time (the baseline);
- docker: `docker run -d` with openblox's flags and the profile's limits, one at a time;
- burst: 20 Sandboxes created at once from a pool of 20 (all warm and probed first);
- sustained: 1, 2 and 5 claims a second for 60 s, each Sandbox deleted once Ready, from a
  pool of 20 and then of 5, refilled by the operator as it goes. Where the pool runs dry,
  a claim goes cold; the run reports when that first happened, how fast the keeper made
  pods warm meanwhile (the rate the node sustains), and what a claim cost after.

Time runs from client.create() being called to it returning (it waits on a watch for
Ready=True).
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

from bench import docker as docker_mod
from bench import env, node_cpu
from bench.claims import Claim, summarize_run, sustained_rate
from bench.cluster_side import (
    POOL_PROFILE,
    Kube,
    delete_namespace,
    make_namespace,
    node_capacity,
    use_bench_profiles,
)
from bench.results import Section
from openblox.client import Client
from openblox.pool.plan import RefillPacer
from openblox.transport import ApiError

TITLES = {
    "pool": "Warm pool: claim create→Ready (burst; 1, 2, 5/s sustained) vs cold create and Docker"
}
POOLS_PATH = f"/api/v1/namespaces/{env.OPERATOR_NAMESPACE}/configmaps/openblox-pools"
READY_TIMEOUT = 180.0
POOL_KEY = "bench-pool"
# bench-pool pods request 25m + the 5m gVisor overhead.
POD_CPU_M = 30
RATES = (1.0, 2.0, 5.0)
# The larger pool first: shrinking to the smaller one then needs no refill.
SIZES = (20, 5)
# Claims waiting at once before a sustained run stops issuing more.
MAX_IN_FLIGHT = 20
# The operator's refill bounds, as its keeper uses them (the defaults).
PACER = RefillPacer()
GROUP: dict[str, Any] = {
    "group": "pool",
    "group_title": "Warm claim vs cold create, create→Ready",
    "log": True,
}


def _set_pool(kube: Kube, namespace: str, size: int | None) -> None:
    value = (
        None
        if size is None
        else f"profile: {POOL_PROFILE}\nnamespaces: [{namespace}]\nsize: {size}\n"
    )
    kube.request(
        "PATCH",
        POOLS_PATH,
        {"data": {POOL_KEY: value}},
        content_type="application/merge-patch+json",
    )


def _warm_pods(kube: Kube, namespace: str) -> int:
    pods = kube.get(
        f"/api/v1/namespaces/{namespace}/pods", labelSelector=f"openblox.sh/pool={POOL_KEY}"
    )["items"]
    return sum(
        1
        for p in pods
        if (p["metadata"].get("annotations") or {}).get("openblox.sh/boundary") == "gvisor"
        and not p["metadata"].get("deletionTimestamp")
        and any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in (p.get("status") or {}).get("conditions") or []
        )
    )


def _wait_warm(kube: Kube, namespace: str, count: int, timeout: float = 300) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if _warm_pods(kube, namespace) >= count:
            return time.monotonic() - started
        time.sleep(1)
    raise TimeoutError(f"the pool did not reach {count} warm pods in {timeout:.0f}s")


def _claim(client: Client, name: str, offset: float) -> Claim:
    started = time.monotonic()
    try:
        sandbox = client.create(POOL_PROFILE, name=name, timeout=READY_TIMEOUT)
    except Exception as error:
        return Claim(offset, None, False, f"{name}: {type(error).__name__}: {error}"[:300])
    return Claim(offset, (time.monotonic() - started) * 1000, "." in sandbox.pod)


def _burst(client: Client, names: list[str]) -> list[Claim]:
    results: list[Claim] = []
    barrier = threading.Barrier(len(names))
    guard = threading.Lock()

    def one(name: str) -> None:
        barrier.wait()
        claim = _claim(client, name, 0.0)
        with guard:
            results.append(claim)

    threads = [threading.Thread(target=one, args=(name,)) for name in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def _api_floor(kube: Kube, namespace: str, count: int) -> list[float]:
    """What the API server alone takes for `count` claims at once: each creates an object
    (the Sandbox), writes it again (the hand-out) and reads it back (the caller learning
    it is Ready), from as many threads. No operator, no watch fan-out: a lower bound."""
    results: list[float] = []
    barrier = threading.Barrier(count)
    guard = threading.Lock()
    base = f"/api/v1/namespaces/{namespace}/configmaps"

    def one(index: int) -> None:
        name = f"floor-{index}"
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}
        barrier.wait()
        started = time.monotonic()
        kube.request("POST", base, body)
        kube.request(
            "PATCH",
            f"{base}/{name}",
            {"data": {"claimed": "true"}},
            content_type="application/merge-patch+json",
        )
        kube.request("GET", f"{base}/{name}")
        with guard:
            results.append((time.monotonic() - started) * 1000)

    threads = [threading.Thread(target=one, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for index in range(count):
        with contextlib.suppress(ApiError):
            kube.request("DELETE", f"{base}/floor-{index}")
    return results


def _sustained(
    client: Client, prefix: str, rate: float, seconds: float
) -> tuple[list[Claim], float | None]:
    """One claim every 1/rate s, each in its own thread; each Sandbox deleted once Ready.

    Open loop, except that it stops issuing claims once MAX_IN_FLIGHT are waiting: past
    that the node is not keeping up, and more would only queue Pending pods for minutes.
    Returns the claims and when it stopped early (None if it ran the whole time).
    """
    count = int(rate * seconds)
    results: list[Claim] = []
    guard = threading.Lock()
    in_flight = [0]
    threads = []
    stopped: float | None = None
    started = time.monotonic()

    def one(index: int) -> None:
        name = f"{prefix}-{index}"
        claim = _claim(client, name, time.monotonic() - started)
        with guard:
            results.append(claim)
            in_flight[0] -= 1
        with contextlib.suppress(Exception):
            client.delete(name)

    for index in range(count):
        delay = started + index / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        with guard:
            if in_flight[0] >= MAX_IN_FLIGHT:
                stopped = time.monotonic() - started
                break
            in_flight[0] += 1
        thread = threading.Thread(target=one, args=(index,))
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join()
    return sorted(results, key=lambda c: c.offset), stopped


def _settle(client: Client, kube: Kube, namespace: str, names: list[str]) -> None:
    """Deletes the Sandboxes and waits until their pods are gone (they hold CPU requests
    while they shut down)."""
    for name in names:
        with contextlib.suppress(Exception):
            client.delete(name)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        owned = [
            p
            for p in kube.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
            if p["metadata"].get("ownerReferences")
        ]
        if not owned:
            return
        time.sleep(1)


def _docker_creates(ctx: Any, section: Section, count: int) -> list[float]:
    docker = docker_mod.shared(ctx)
    if docker.problem:
        section.notes.append(f"docker baseline not measured: {docker.problem}")
        return []
    section.notes.extend(n for n in docker.notes if n not in section.notes)
    samples = []
    for index in range(count):
        name = f"obx-bench-pool-{ctx.run_id}-{index}"
        started = time.monotonic()
        try:
            docker.run(
                *docker_mod.idle_container(name, "pool", memory="96m", cpus="0.5"),
                timeout=READY_TIMEOUT,
            )
        except RuntimeError as error:
            section.notes.append(f"docker run failed: {str(error)[:200]}")
            break
        samples.append((time.monotonic() - started) * 1000)
        with contextlib.suppress(RuntimeError):
            docker.run("rm", "-f", name, timeout=120)
    return samples


def _record(section: Section, key: str, title: str, claims: list[Claim], **extra: Any) -> None:
    cold = sum(1 for c in claims if c.ms is not None and not c.warm)
    section.figure(
        f"pool.{key}",
        title,
        "ms",
        [c.ms for c in claims if c.ms is not None],
        baseline="pool.cold",
        label=title,
        notes=f"{cold} of {len(claims)} found no warm pod and went cold",
        **GROUP,
        **extra,
    )


def run(ctx: Any, section: Section) -> None:
    use_bench_profiles(ctx)
    kube: Kube = ctx.kube
    rid = ctx.run_id
    burst = ctx.n(20, 3)
    seconds = ctx.seconds(60.0, 5.0)
    sizes = SIZES if not ctx.quick else (3, 2)
    rates = RATES if not ctx.quick else (1.0, 2.0)
    peak = max(burst * 2, max(sizes) + 8)
    free = node_capacity(kube)["cpu_free_m"]
    section.notes.append(f"{free:.0f}m of CPU requests were free on the node at the start")
    if free < peak * POD_CPU_M:
        section.notes.append(
            f"the burst's peak needs about {peak * POD_CPU_M}m ({peak} pods of {POD_CPU_M}m), "
            "so some pods waited"
        )
    ns_warm = make_namespace(kube, f"obx-bench-pool-{rid}", sandboxes=True)
    ctx.cleanup(delete_namespace, kube, ns_warm)
    ns_cold = make_namespace(kube, f"obx-bench-pool-cold-{rid}", sandboxes=True)
    ctx.cleanup(delete_namespace, kube, ns_cold)
    ctx.cleanup(_set_pool, kube, ns_warm, None)
    warm = Client(ns_warm, kubeconfig=env.KUBECONFIG)
    cold = Client(ns_cold, kubeconfig=env.KUBECONFIG)
    errors: list[str] = []

    # Cold and Docker first, in the same run: nothing of the pool's is running yet.
    cold_claims = []
    for index in range(ctx.n(10, 2)):
        cold_claims.append(_claim(cold, f"cold-{index}", 0.0))
        _settle(cold, kube, ns_cold, [f"cold-{index}"])
    errors.extend(c.error for c in cold_claims if c.error)
    section.figure(
        "pool.cold",
        "cold create (no pool), one at a time",
        "ms",
        [c.ms for c in cold_claims if c.ms is not None],
        label="cold create",
        **GROUP,
    )
    docker_samples = _docker_creates(ctx, section, ctx.n(10, 2))
    if docker_samples:
        section.figure(
            "pool.docker_runsc",
            "docker run -d --runtime runsc (openblox flags, 96m, 0.5 CPU), one at a time",
            "ms",
            docker_samples,
            baseline="pool.cold",
            label="docker run --runtime runsc",
            **GROUP,
        )
    ctx.log("pool: cold and docker done")

    # Burst: all at once from a full pool.
    _set_pool(kube, ns_warm, burst)
    fill = _wait_warm(kube, ns_warm, burst)
    section.notes.append(f"the pool of {burst} was filled from empty in {fill:.0f} s")
    section.figure(
        f"pool.burst{burst}.api_floor",
        f"API floor: {burst} at once, each a create, a patch and a read (the writes a claim "
        "cannot do without), no operator",
        "ms",
        _api_floor(kube, ns_cold, burst),
        label="API floor",
        **GROUP,
    )
    names = [f"burst-{i}" for i in range(burst)]
    by_role = node_cpu.roles(kube)
    cpu_before = node_cpu.snapshot(by_role)
    claims = _burst(warm, names)
    cpu_after = node_cpu.snapshot(by_role)
    errors.extend(c.error for c in claims if c.error)
    _record(
        section,
        f"burst{burst}",
        f"burst of {burst} from a pool of {burst}",
        claims,
        headline=True,
        floor=f"pool.burst{burst}.api_floor",
    )
    if by_role:
        node_cpu.record_burst(section, burst, node_cpu.per_claim_ms(cpu_before, cpu_after, burst))
    else:
        section.notes.append("CPU per claim not measured: this is not the embedded cluster's node")
    _settle(warm, kube, ns_warm, names)
    ctx.log("pool: burst done")

    rows: list[list[Any]] = []
    held: dict[int, list[tuple[float, dict[str, Any]]]] = {}
    series: dict[str, list[list[float]]] = {}
    for size in sizes:
        _set_pool(kube, ns_warm, size)
        for rate in rates:
            _wait_warm(kube, ns_warm, size)
            time.sleep(2)  # surplus pods from a larger size are gone
            before = _warm_pods(kube, ns_warm)
            started = time.monotonic()
            claims, stopped = _sustained(warm, f"s{size}r{rate:g}", rate, seconds)
            after = _warm_pods(kube, ns_warm)
            summary = summarize_run(
                claims,
                warm_before=before,
                warm_after=after,
                seconds=time.monotonic() - started,
            )
            errors.extend(c.error for c in claims if c.error)
            _record(
                section,
                f"rate{rate:g}.pool{size}",
                f"{rate:g} claim/s for {seconds:.0f} s, pool of {size}",
                claims,
                headline=rate == rates[0],
            )
            held.setdefault(size, []).append((rate, summary))
            series[f"{rate:g}/s, pool of {size}"] = [
                [round(c.offset, 2), round(c.ms, 1)] for c in claims if c.ms is not None
            ]
            rows.append(
                [f"{rate:g}/s", size, *_row(summary), "-" if stopped is None else f"{stopped:.0f}"]
            )
            _settle(warm, kube, ns_warm, [])
            ctx.log(f"pool: {rate:g}/s with pool {size} done: {summary}")
    _set_pool(kube, ns_warm, None)

    for size, runs in held.items():
        best = sustained_rate(runs)
        refill = max((s["refill_per_s"] or 0.0) for _, s in runs)
        section.figure(
            f"pool.sustained.pool{size}",
            f"highest rate tried with no claim finding the pool of {size} empty",
            "claims/s",
            value=best,
            higher_is_better=True,
            headline=True,
            notes=f"the keeper made at most {refill:.2f} pods/s warm in any run"
            + ("; the pool ran dry at every rate tried" if best is None else ""),
        )
    section.table(
        "Sustained claims, each Sandbox deleted once Ready",
        [
            "rate",
            "pool",
            "claims",
            "warm",
            "went cold",
            "failed",
            "pool first empty at (s)",
            "pods made warm / s",
            "p50 ms",
            "p95 ms",
            "p99 ms",
            "p50 / p99 ms while warm",
            "p50 / p99 ms once empty",
            f"stopped issuing at (s; {MAX_IN_FLIGHT} waiting)",
        ],
        rows,
    )
    section.series["claims"] = {
        "title": "Claim create→Ready over each sustained run",
        "xlabel": "s since the run started",
        "ylabel": "ms",
        "lines": series,
        "styles": dict.fromkeys(series, "."),
        "logy": True,
    }
    if errors:
        section.notes.append(f"{len(errors)} creates failed: " + "; ".join(errors[:10]))
    section.notes.append(
        f"Profile `{POOL_PROFILE}` (cpu limit 500m, request 25m: Burstable like the shipped "
        "code-exec; memory 96Mi, scratch 8Mi, gVisor) for warm and cold alike, so a pool of 20 "
        "plus its refill fits next to other sessions' pods on this 2-core node. A claim boots "
        "nothing; the refill (a gVisor boot and a boundary probe per pod) does. Refill: at most "
        f"{PACER.rate:g} pods/s, {PACER.in_flight} starting at once (pool/plan.py)."
    )
    with contextlib.suppress(ApiError):
        _set_pool(kube, ns_warm, None)


def _row(summary: dict[str, Any]) -> list[Any]:
    def pair(a: Any, b: Any) -> str:
        return "-" if a is None else f"{a:.0f} / {b:.0f}"

    return [
        summary["claims"],
        summary["warm"],
        summary["cold"],
        summary["failed"],
        summary["first_dry_s"] if summary["first_dry_s"] is not None else "never",
        summary["refill_per_s"],
        summary["p50"],
        summary["p95"],
        summary["p99"],
        pair(summary["p50_before_dry"], summary["p99_before_dry"]),
        pair(summary["p50_after_dry"], summary["p99_after_dry"]),
    ]
