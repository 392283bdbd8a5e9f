"""Warm claims: create→Ready of a Sandbox handed a pod from a warm pool, beside a cold
create of the same profile and `docker run --runtime runsc` in the same run, and beside
kubernetes-sigs/agent-sandbox doing the same (its SandboxClaims from its SandboxWarmPool
of the same pod; bench/sections/pool_agent_sandbox.py), the two systems alternating.

- cold: the profile in a namespace no pool serves, one at a time (the baseline);
- docker: `docker run -d` with openblox's flags and the profile's limits, one at a time;
- burst: 20 Sandboxes created at once from a pool of 20 (all warm and probed first);
- sustained: 1, 2 and 5 claims a second for 60 s, each Sandbox deleted once Ready, from a
  pool of 20 and then of 5, refilled by the operator as it goes. Where the pool runs dry,
  a claim goes cold; the run reports when that first happened, how fast the keeper made
  pods warm meanwhile (the rate the node sustains), and what a claim cost after.

Each burst also records the API writes per claim (the API server's request counter) and
the node's CPU per claim, for both systems. Time runs from the create call to it
returning (openblox's client waits on a watch for Ready=True; agent-sandbox's claims are
watched the same way).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from bench import agent_sandbox, claim_load, env, node_cpu
from bench import docker as docker_mod
from bench.claim_load import ClaimFunction
from bench.claims import Claim
from bench.cluster_side import (
    POOL_PROFILE,
    Kube,
    delete_namespace,
    make_namespace,
    node_capacity,
    set_pool,
    use_bench_profiles,
    warm_pool_pods,
)
from bench.results import Section
from bench.sections import pool_runs, pool_sustained
from bench.sections.pool_agent_sandbox import CONTROLLER_ROLE, AgentSandbox
from bench.sections.pool_runs import GROUP, Side
from openblox.client import Client
from openblox.pool.plan import RefillPacer
from openblox.transport import ApiError

TITLES = {
    "pool": "Warm pool: claim create→Ready (burst; 1, 2, 5/s sustained) vs cold create and Docker"
}
READY_TIMEOUT = 180.0
POOL_KEY = "bench-pool"
# bench-pool pods request 25m + the 5m gVisor overhead.
POD_CPU_M = 30
RATES = (1.0, 2.0, 5.0)
SIZES = (20, 5)
# The operator's refill bounds, as its keeper uses them (the defaults).
PACER = RefillPacer()


def _set_pool(kube: Kube, namespace: str, size: int | None) -> None:
    set_pool(kube, POOL_KEY, POOL_PROFILE, namespace, size)


def _warm_pods(kube: Kube, namespace: str) -> int:
    return warm_pool_pods(kube, namespace, POOL_KEY)


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


def _drain(kube: Kube, namespace: str, timeout: float = 180) -> None:
    """Removes the pool and waits until none of its pods is left."""
    _set_pool(kube, namespace, None)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not kube.get(
            f"/api/v1/namespaces/{namespace}/pods", labelSelector=f"openblox.sh/pool={POOL_KEY}"
        )["items"]:
            return
        time.sleep(1)


def _openblox(kube: Kube, client: Client, namespace: str) -> Side:
    return Side(
        label="openblox",
        prefix="pool",
        claim=lambda name, offset: _claim(client, name, offset),
        delete=client.delete,
        set_pool=lambda size: _set_pool(kube, namespace, size),
        wait_warm=lambda count: _wait_warm(kube, namespace, count),
        warm=lambda: _warm_pods(kube, namespace),
        settle=lambda names: _settle(client, kube, namespace, names),
        drain=lambda: _drain(kube, namespace),
    )


def _rival(ctx: Any, section: Section) -> tuple[Side, ClaimFunction] | None:
    """agent-sandbox beside openblox (its side and its cold claim), or None and a note saying
    why if it cannot run."""
    rival = AgentSandbox(ctx)
    try:
        rival.start()
    except Exception as error:
        section.notes.append(f"agent-sandbox not measured: {type(error).__name__}: {error}"[:600])
        return None
    section.notes.append(
        f"agent-sandbox {agent_sandbox.VERSION} ({agent_sandbox.MODULE}, built from the Go module "
        "proxy by the run) beside openblox, alternating scenario by scenario, each system's pool "
        "emptied before the other's fills. Its controller runs on the node out of cluster with "
        "the admin kubeconfig and its default flags bar --extensions --leader-elect=false; its "
        "SandboxTemplate's pod is openblox's pool pod for the same profile (the same image, "
        f"{rival.image}, "
        "IfNotPresent; RuntimeClass gvisor, resources, securityContext, seccomp, no token, "
        "no service links, DNS to loopback) in a namespace with a default-deny NetworkPolicy. "
        "Its pods get none of openblox's NRI plugin hardening (noexec scratch, bounded "
        "/dev/shm, process cap) and no boundary probe before they count as warm: kubelet "
        "Ready is enough for it."
    )
    return Side(
        label="agent-sandbox",
        prefix="pool.agent_sandbox",
        claim=rival.claim,
        delete=rival.delete,
        set_pool=rival.set_pool,
        wait_warm=rival.wait_warm,
        warm=rival.warm,
        settle=rival.settle,
        drain=rival.drain,
        roles=lambda: {CONTROLLER_ROLE: [rival.pid]} if rival.pid else {},
        check=rival.pod_check,
    ), rival.cold_claim


def run(ctx: Any, section: Section) -> None:
    use_bench_profiles(ctx)
    kube: Kube = ctx.kube
    rid = ctx.run_id
    burst = ctx.n(20, 3)
    seconds = ctx.seconds(60.0, 5.0)
    chosen = tuple(int(x) for x in str(getattr(ctx.args, "pool_sizes", "") or "").split(",") if x)
    sizes = (chosen or SIZES) if not ctx.quick else (3, 2)
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
    sides = [_openblox(kube, warm, ns_warm)]
    found = _rival(ctx, section) if not getattr(ctx.args, "no_agent_sandbox", False) else None
    rival_cold = None
    if found is not None:
        sides.append(found[0])
        rival_cold = found[1]
    errors: list[str] = []

    # Cold and Docker first, in the same run: nothing of the pools' is running yet. The two
    # systems' cold creates alternate one by one.
    cold_claims: dict[str, list[Claim]] = {side.prefix: [] for side in sides}
    for index in range(ctx.n(10, 2)):
        cold_claims["pool"].append(_claim(cold, f"cold-{index}", 0.0))
        _settle(cold, kube, ns_cold, [f"cold-{index}"])
        if rival_cold is not None:
            claim = rival_cold(f"cold-{index}", 0.0)
            cold_claims[sides[1].prefix].append(claim)
            sides[1].settle([f"cold-{index}"])
    for side in sides:
        claims = cold_claims[side.prefix]
        errors.extend(c.error for c in claims if c.error)
        title = "cold create (no pool), one at a time"
        section.figure(
            f"{side.prefix}.cold",
            title if side.prefix == "pool" else f"{side.label}: {title}",
            "ms",
            [c.ms for c in claims if c.ms is not None],
            label="cold create" if side.prefix == "pool" else f"{side.label}: cold create",
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

    # Burst: all at once from a full pool, each system in turn.
    section.figure(
        f"pool.burst{burst}.api_floor",
        f"API floor: {burst} at once, each a create, a patch and a read (the writes a claim "
        "cannot do without), no operator",
        "ms",
        claim_load.api_floor(kube, ns_cold, burst),
        label="API floor",
        **GROUP,
    )
    for side in sides:
        done = pool_runs.burst(
            kube, section, side, burst, headline=True, floor=f"pool.burst{burst}.api_floor"
        )
        errors.extend(c.error for c in done.claims if c.error)
        section.notes.append(
            f"{side.label}: the pool of {burst} filled from empty in {done.fill_s:.0f} s"
        )
        if not done.cpu_ms:
            section.notes.append(
                "CPU per claim not measured: this is not the embedded cluster's node"
            )
        elif side.prefix == "pool":
            node_cpu.record_burst(section, burst, done.cpu_ms)
        else:
            section.table(
                f"{side.label}: node CPU per claim during the burst of {burst}",
                ["process", "CPU ms per claim"],
                [[role, round(ms, 1)] for role, ms in done.cpu_ms.items()],
            )
        ctx.log(f"pool: {side.label} burst done")

    pool_sustained.run(
        ctx, section, sides, sizes=sizes, rates=rates, seconds=seconds, errors=errors
    )
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
