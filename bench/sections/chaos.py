"""Under fire: a user's traffic on the kind cluster through a schedule of faults, and what
it saw. Claims at 1/s (alternately from a warm pool and cold), each Sandbox running three
commands and writing a file it reads back; two keepers that live through the whole run
checking their files; Sandboxes left for the reaper with a 45 s maxAgeSeconds. After a
quiet stretch, one fault of each kind (bench/chaos_faults.py), one after another, then a
quiet tail. An auditor checks the cluster every 2 s from the admin's side.

Needs the three-node kind cluster with openblox installed (`make kind-up`); run it alone:
`.venv/bin/python -m bench --only chaos`. It stops by itself within 25 minutes (one hard
deadline runs through every phase), and it sends traffic only to the kind cluster on this
machine.
"""

from __future__ import annotations

import time
from typing import Any

from bench import chaos_report, env
from bench.chaos_audit import Auditor
from bench.chaos_load import PROFILE
from bench.chaos_records import Fault, leaked_pool_pods, orphans, stuck
from bench.cluster_side import Kube, delete_namespace, make_namespace, set_pool, warm_pool_pods
from bench.results import Section

TITLES = {"chaos": "Under fire on kind: claims, execs and files through a schedule of faults"}
KIND_KUBECONFIG = "/var/lib/openblox/kind/openblox.kubeconfig"
POOL_KEY = "chaos"
POOL_SIZE = 4
RATE = 1.0
BUDGET_SECONDS = 25 * 60
HEAL_BOUND_SECONDS = 120.0
# What the end takes at most: waiting for calls in flight (a claim's 120 s timeout and a
# delete's 90 s patience), the cluster coming to rest, and removing the namespaces.
STOP_PATIENCE_SECONDS = 240.0
SETTLE_SECONDS = 150.0
CLEANUP_SECONDS = 60.0


def _wait(what: str, check: Any, seconds: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        if check():
            return time.monotonic() - started
        time.sleep(1.0)
    raise TimeoutError(f"{what} not within {seconds:.0f} s")


def _prepare(ctx: Any, kube: Kube) -> dict[str, str]:
    try:
        kube.get("/version")
    except Exception as error:
        raise RuntimeError(
            f"the kind cluster does not answer ({error}); `make kind-up` creates it"
        ) from error
    namespaces = {
        role: f"obx-chaos-{role}-{ctx.run_id}" for role in ("pool", "cold", "keep", "reaped")
    }
    for name in namespaces.values():
        make_namespace(kube, name, sandboxes=True)
        ctx.cleanup(delete_namespace, kube, name)
    set_pool(kube, POOL_KEY, PROFILE, namespaces["pool"], POOL_SIZE)
    ctx.cleanup(set_pool, kube, POOL_KEY, PROFILE, namespaces["pool"], None)
    warmed = _wait(
        "the pool warm",
        lambda: warm_pool_pods(kube, namespaces["pool"], POOL_KEY) >= POOL_SIZE,
        300,
    )
    ctx.log(f"chaos: pool of {POOL_SIZE} warm in {warmed:.0f} s")
    return namespaces


def _inject(ctx: Any, kind: Any, t0: float) -> Fault:
    from bench.chaos_faults import wait_healthy

    injected = time.monotonic()
    fault = Fault(kind.name, injected - t0)
    try:
        check = kind.inject()
    except Exception as error:
        fault.note = f"could not inject: {error}"
        ctx.log(f"chaos: {kind.name}: {fault.note}")
        return fault
    healed = wait_healthy(check, HEAL_BOUND_SECONDS)
    if healed is not None:
        fault.healthy = time.monotonic() - t0
    else:
        fault.note = f"its check did not pass within {HEAL_BOUND_SECONDS:.0f} s"
    took = "never" if fault.healthy is None else f"{fault.healthy - fault.injected:.0f} s"
    ctx.log(f"chaos: {kind.name} injected; its check passed after {took}")
    return fault


def _drive(ctx: Any, load: Any, t0: float, deadline: float) -> list[Fault]:
    """The schedule: quiet, then each fault and a gap after it, then quiet again; a fault
    starts only if its longest injection and check still fit before `deadline`."""
    from tests.cluster.kubectl import Kube as Kubectl

    from bench.chaos_faults import FREEZE_SECONDS, kinds

    quiet, gap = ctx.seconds(90, 20), ctx.seconds(90, 30)
    faults: list[Fault] = []
    load.start(RATE)
    time.sleep(quiet)
    for kind in kinds(Kubectl(KIND_KUBECONFIG)):
        if time.monotonic() + FREEZE_SECONDS + HEAL_BOUND_SECONDS + 30 > deadline:
            ctx.log(f"chaos: out of time before {kind.name}")
            break
        started = time.monotonic()
        faults.append(_inject(ctx, kind, t0))
        time.sleep(max(0.0, min(gap - (time.monotonic() - started), deadline - time.monotonic())))
    time.sleep(max(0.0, min(quiet, deadline - time.monotonic())))
    return faults


def _settle(auditor: Auditor, namespaces: dict[str, str], seconds: float) -> dict[str, list[str]]:
    """Wait up to `seconds` for the cluster to come to rest, then what is still wrong; the
    key `audited` is there only if an audit could read the cluster."""
    found: dict[str, list[str]] = {}
    started = time.monotonic()
    while True:
        seen = auditor.audit_once()
        if seen is not None:
            sandboxes, pods = seen
            pool_pods = [p for p in pods if p["metadata"]["namespace"] == namespaces["pool"]]
            found = {
                "audited": [],
                "orphans": orphans(sandboxes, pods),
                "leaked_pool_pods": leaked_pool_pods(pool_pods, POOL_KEY, POOL_SIZE),
                "stuck": stuck(sandboxes),
                "overdue": sorted(auditor.overdue(time.time())),
            }
            if not any(found.values()):
                return found
        if time.monotonic() - started > seconds:
            return found
        time.sleep(2.0)


def run(ctx: Any, section: Section) -> None:
    env.use_test_helpers()
    from bench.chaos_load import Load

    began = time.monotonic()
    end_by = began + BUDGET_SECONDS - CLEANUP_SECONDS
    traffic_until = end_by - STOP_PATIENCE_SECONDS - SETTLE_SECONDS
    kube = Kube(KIND_KUBECONFIG)
    namespaces = _prepare(ctx, kube)
    t0 = time.monotonic()
    load = Load(KIND_KUBECONFIG, namespaces, t0, ctx.log)
    auditor = Auditor(KIND_KUBECONFIG, list(namespaces.values()), namespaces["reaped"], load.ledger)
    auditor.start()
    try:
        faults = _drive(ctx, load, t0, traffic_until)
    finally:
        stopped = time.monotonic()
        patience = max(30.0, min(STOP_PATIENCE_SECONDS, end_by - SETTLE_SECONDS - stopped))
        unfinished = load.stop(patience=patience)
        auditor.stop()
    seconds = stopped - t0
    rest = _settle(auditor, namespaces, max(10.0, end_by - time.monotonic()))
    chaos_report.record(
        section,
        load,
        auditor=auditor,
        faults=faults,
        rest=rest,
        unfinished=unfinished,
        setting=(
            f"{seconds / 60:.1f} min of traffic at {RATE:g} claim/s (a pool of {POOL_SIZE} and "
            "cold, alternating; at most 8 cycles at once, a claim due past that skipped), "
            "3 execs and a file round trip per claim, 2 keepers, a Sandbox for the reaper "
            "every 40 s."
        ),
    )
