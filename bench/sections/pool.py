"""Warm claims: create→Ready of a Sandbox handed a pod from a warm pool, beside a cold
create of the same profile in the same run.

- burst: 20 Sandboxes created at once from a pool of 20 (all warm and probed first);
- sustained: one claim a second for 60 s, each Sandbox deleted once Ready, from a pool of
  5 and of 20 (each refilled by the operator as it goes);
- cold: the same profile in a namespace no pool serves, one at a time.

Time runs from client.create() being called to it returning (it waits on a watch for
Ready=True). A claim that found no warm pod goes cold; the run counts those.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from typing import Any

from kubernetes.client.exceptions import ApiException

from bench import env
from bench.kube import (
    POOL_PROFILE,
    Kube,
    delete_namespace,
    make_namespace,
    node_capacity,
    use_bench_profiles,
)
from bench.results import Section
from openblox.client import Client

TITLES = {"pool": "Warm pool: claim create→Ready (burst, 1/s sustained) vs cold create"}
POOLS_PATH = f"/api/v1/namespaces/{env.OPERATOR_NAMESPACE}/configmaps/openblox-pools"
READY_TIMEOUT = 180.0
POOL_KEY = "bench-pool"
# bench-pool pods request 25m + the 5m gVisor overhead.
POD_CPU_M = 30


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


def _wait_warm(kube: Kube, namespace: str, count: int, timeout: float = 600) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if _warm_pods(kube, namespace) >= count:
            return time.monotonic() - started
        time.sleep(1)
    raise TimeoutError(f"the pool did not reach {count} warm pods in {timeout:.0f}s")


def _claim(client: Client, name: str) -> tuple[float, bool]:
    started = time.monotonic()
    sandbox = client.create(POOL_PROFILE, name=name, timeout=READY_TIMEOUT)
    elapsed = (time.monotonic() - started) * 1000
    return elapsed, "." in sandbox.pod  # a pool pod's name has a dot; a cold one's cannot


def _burst(client: Client, names: list[str]) -> list[tuple[float, bool] | str]:
    results: list[tuple[float, bool] | str] = ["not run"] * len(names)
    barrier = threading.Barrier(len(names))

    def one(index: int) -> None:
        barrier.wait()
        try:
            results[index] = _claim(client, names[index])
        except Exception as error:
            results[index] = f"{type(error).__name__}: {error}"

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(names))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def _sustained(
    client: Client, prefix: str, rate: float, seconds: float
) -> list[tuple[float, bool] | str]:
    """One claim every 1/rate s, each in its own thread; each Sandbox deleted once Ready."""
    count = int(rate * seconds)
    results: list[tuple[float, bool] | str] = ["not run"] * count
    threads = []

    def one(index: int) -> None:
        name = f"{prefix}-{index}"
        try:
            results[index] = _claim(client, name)
        except Exception as error:
            results[index] = f"{type(error).__name__}: {error}"
        with contextlib.suppress(Exception):
            client.delete(name)

    started = time.monotonic()
    for index in range(count):
        delay = started + index / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        thread = threading.Thread(target=one, args=(index,))
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join()
    return results


def _delete_all(client: Client, kube: Kube, namespace: str, names: list[str]) -> None:
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


def run(ctx: Any, section: Section) -> None:
    use_bench_profiles(ctx)
    kube: Kube = ctx.kube
    rid = ctx.run_id
    burst = ctx.n(20, 3)
    seconds = ctx.seconds(60.0, 5.0)
    sizes = (ctx.n(5, 2), ctx.n(20, 3))
    peak = max(burst * 2, max(sizes) + 8)
    free = node_capacity(kube)["cpu_free_m"]
    if free < peak * POD_CPU_M:
        section.notes.append(
            f"only {free:.0f}m of CPU requests were free; the burst's peak needs about "
            f"{peak * POD_CPU_M}m ({peak} pods of {POD_CPU_M}m), so some pods waited"
        )
    ns_warm = make_namespace(kube, f"obx-bench-pool-{rid}", sandboxes=True)
    ctx.cleanup(delete_namespace, kube, ns_warm)
    ns_cold = make_namespace(kube, f"obx-bench-pool-cold-{rid}", sandboxes=True)
    ctx.cleanup(delete_namespace, kube, ns_cold)
    ctx.cleanup(_set_pool, kube, ns_warm, None)
    warm = Client(ns_warm, kubeconfig=env.KUBECONFIG)
    cold = Client(ns_cold, kubeconfig=env.KUBECONFIG)
    errors: list[str] = []
    fell_cold: dict[str, int] = {}

    def record(
        key: str, title: str, outcomes: list[tuple[float, bool] | str], **extra: Any
    ) -> None:
        samples = [o[0] for o in outcomes if not isinstance(o, str)]
        fell_cold[key] = sum(1 for o in outcomes if not isinstance(o, str) and not o[1])
        errors.extend(f"{key}: {o}" for o in outcomes if isinstance(o, str))
        section.figure(
            f"pool.{key}",
            title,
            "ms",
            samples,
            baseline="pool.cold",
            group="pool",
            group_title="Warm claim vs cold create, create→Ready",
            label=title,
            notes=f"{fell_cold[key]} of {len(outcomes)} found no warm pod and went cold",
            **extra,
        )

    # Cold, in the same run, first: nothing of the pool's is running yet.
    cold_outcomes: list[tuple[float, bool] | str] = []
    for index in range(ctx.n(10, 2)):
        name = f"cold-{index}"
        try:
            cold_outcomes.append(_claim(cold, name))
        except Exception as error:
            cold_outcomes.append(f"{type(error).__name__}: {error}")
        _delete_all(cold, kube, ns_cold, [name])
    cold_samples = [o[0] for o in cold_outcomes if not isinstance(o, str)]
    errors.extend(f"cold: {o}" for o in cold_outcomes if isinstance(o, str))
    section.figure(
        "pool.cold",
        "cold create (no pool), one at a time",
        "ms",
        cold_samples,
        group="pool",
        label="cold create",
    )
    ctx.log("pool: cold done")

    # Burst: all at once from a full pool.
    _set_pool(kube, ns_warm, burst)
    fill = _wait_warm(kube, ns_warm, burst)
    section.notes.append(f"the pool of {burst} was filled from empty in {fill:.0f} s")
    names = [f"burst-{i}" for i in range(burst)]
    record(
        f"burst{burst}",
        f"burst of {burst} from a pool of {burst}",
        _burst(warm, names),
        headline=True,
    )
    _delete_all(warm, kube, ns_warm, names)
    ctx.log("pool: burst done")

    for size in sizes:
        _set_pool(kube, ns_warm, size)
        _wait_warm(kube, ns_warm, size)
        time.sleep(2)  # surplus pods from the previous size are gone
        outcomes = _sustained(warm, f"s{size}", 1.0, seconds)
        record(
            f"rate1.pool{size}",
            f"1 claim/s for {seconds:.0f} s, pool of {size}",
            outcomes,
            headline=size == sizes[-1],
        )
        ctx.log(f"pool: 1/s with pool {size} done")
    _set_pool(kube, ns_warm, None)

    section.table(
        "Claims that found no warm pod (went cold)",
        ["run", "cold fallbacks"],
        [[key, count] for key, count in fell_cold.items()],
    )
    if errors:
        section.notes.append(f"{len(errors)} creates failed: " + "; ".join(errors[:10]))
    section.notes.append(
        f"Profile `{POOL_PROFILE}` (cpu 25m, memory 96Mi, scratch 8Mi, gVisor) for warm and cold "
        "alike, so a pool of 20 plus its refill fits next to other sessions' pods on this 2-core "
        "node; a claim does not boot anything, so its time does not depend on the CPU limit, "
        "but the refill (a gVisor boot per pod) does. Refill: at most 2 pods/s, 4 starting at once."
    )
    section.series["pool"] = json.loads(json.dumps({"fell_cold": fell_cold}))
    with contextlib.suppress(ApiException):
        _set_pool(kube, ns_warm, None)
