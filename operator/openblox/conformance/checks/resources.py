"""Resources: memory, processes, scratch, CPU and output are all capped, as declared."""

from __future__ import annotations

import json
import re
import time
from typing import Any

from openblox.conformance.backend import ExecOutcome, Handle
from openblox.conformance.canaries import NET, Canaries
from openblox.conformance.checks.registry import check
from openblox.conformance.context import CannotRun, Context, Verdict, fail, ok, volume_medium
from openblox.guest import PROBE, source
from openblox.names import TMP_DIR

MiB = 1 << 20
UNDECLARED_MEMORY_TARGET = 1024 * MiB
UNDECLARED_SCRATCH_TARGET = 512 * MiB
UNDECLARED_PROCESS_TARGET = 1100
FLOOD_BYTES = 8 * MiB


def _mib(value: int | None) -> str:
    return "undeclared" if value is None else f"{value / MiB:.0f} MiB"


def _last_json(outcome: ExecOutcome) -> dict[str, Any] | None:
    lines = outcome.stdout.decode("utf-8", "replace").strip().splitlines()
    try:
        result: dict[str, Any] = json.loads(lines[-1])
    except (ValueError, IndexError):
        return None
    return result


def _died(ctx: Context, handle: Handle) -> str | None:
    """How the sandbox's pod died (gone, replaced, container terminated), or None if it
    shows no sign of it; for backends without a pod, whether it still exists."""
    if not handle.pod:
        return None if ctx.backend.exists(handle) else "the sandbox is gone"
    pod = ctx.pod(handle)
    if pod is None:
        return "its pod is gone"
    if handle.uid and pod["metadata"].get("uid") != handle.uid:
        return "its pod was replaced by a new one"
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        for where in ("state", "lastState"):
            state = (status.get(where) or {}).get("terminated")
            if state:
                return f"container terminated: {state.get('reason')} (exit {state.get('exitCode')})"
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return "its pod is being deleted"
    return None


@check("RES-001")
def memory_capped(ctx: Context) -> Verdict:
    with ctx.own_sandbox() as handle:
        limit = handle.limits.memory_bytes
        target = 2 * limit if limit else UNDECLARED_MEMORY_TARGET
        argv = ["python3", "-c", source(PROBE), "memory", json.dumps({"bytes": target})]
        outcome = ctx.backend.exec(handle, argv, timeout=90)
        progress = re.findall(rb"allocated (\d+) MiB", outcome.stdout)
        reached = int(progress[-1]) if progress else 0
        result = _last_json(outcome)
        declared = f"limit {_mib(limit)}"
        if result and result.get("stopped") == "reached target":
            return fail(f"allocated and touched {_mib(result['allocated'])} with {declared}")
        if result and result.get("stopped") == "MemoryError":
            allocated = int(result["allocated"])
            if limit and allocated > limit * 1.25:
                return fail(f"MemoryError only at {_mib(allocated)}, above the {declared}")
            return ok(f"allocation refused (MemoryError) at {_mib(allocated)}; {declared}")
        if limit and reached * MiB > limit * 1.25:
            return fail(f"got to {reached} MiB before being stopped, above the {declared}")
        time.sleep(3)
        died = _died(ctx, handle)
        if outcome.timed_out:
            raise CannotRun(
                f"the allocation neither finished nor was stopped within {outcome.duration:.0f}s"
            )
        if outcome.error is None and (outcome.exit_code or 0) >= 128:
            how = f"the process was killed (exit {outcome.exit_code})"
        elif outcome.error is not None and died:
            how = f"the exec broke as the sandbox went down ({outcome.error[:80]})"
        else:
            raise CannotRun(
                f"no verdict from the allocation (exit {outcome.exit_code}, "
                f"{outcome.error or 'no error'}) and no sign that anything was killed"
            )
        survived = ctx.backend.exec(handle, ["true"], timeout=30)
        after = (
            f"the whole sandbox was killed ({died})"
            if died
            else "the sandbox itself survived and still runs commands"
            if survived.exit_code == 0
            else f"the sandbox no longer runs commands ({survived.error or survived.exit_code})"
        )
        return ok(f"{how} after ≥{reached} MiB of {_mib(target)} asked; {declared}; {after}")


@check("RES-002")
def process_cap(ctx: Context) -> Verdict:
    with ctx.own_sandbox() as handle:
        cap = handle.limits.processes
        # Past the cap by a margin is enough to show it is not there (and keeps a slow
        # fork, as under gVisor, inside the exec timeout).
        target = cap + 64 if cap else UNDECLARED_PROCESS_TARGET
        config = {"count": target, "hold": 50}
        argv = ["python3", "-c", source(PROBE), "forkbomb", json.dumps(config)]
        outcome = ctx.backend.exec(handle, argv, timeout=60)
        result = _last_json(outcome)
        health = _node_health(ctx)
        if result is None:
            progress = re.findall(rb"started (\d+)", outcome.stdout)
            if not progress or (cap is not None and int(progress[-1]) <= cap):
                raise CannotRun(
                    f"the fork bomb was cut short without a verdict (exit {outcome.exit_code}, "
                    f"timed out {outcome.timed_out}, {outcome.error or 'no error'}; "
                    f"{int(progress[-1]) if progress else 0} started); {health}"
                )
            result = {
                "started": int(progress[-1]),
                "stopped": f"the command was cut short (exit {outcome.exit_code}, timed out "
                f"{outcome.timed_out}, {outcome.error or 'no error'})",
                "seconds": round(outcome.duration, 1),
            }
        started, stopped = int(result["started"]), result["stopped"]
        text = (
            f"{started} processes started of {target} tried in {result['seconds']}s, stopped by "
            f"{stopped}; declared cap {cap if cap else 'none'}; {health}"
        )
        if "NOT healthy" in health:
            return fail(text)
        if cap is not None and started + 1 > cap:
            return fail(f"the cap is not enforced: {text}")
        if cap is None and stopped == "reached target":
            return fail(f"no cap at all: {text}")
        return ok(text)


def _node_health(ctx: Context) -> str:
    node = ctx.node()
    parts = []
    if node:
        conditions = {
            c["type"]: c["status"] for c in (node.get("status") or {}).get("conditions") or []
        }
        healthy = conditions.get("Ready") == "True" and conditions.get("PIDPressure") != "True"
        parts.append(
            f"node {'healthy' if healthy else 'NOT healthy'} (Ready {conditions.get('Ready')}, "
            f"PIDPressure {conditions.get('PIDPressure')})"
        )
    started = time.monotonic()
    other = ctx.exec(["true"], timeout=30)
    if other.exit_code == 0:
        parts.append(f"another sandbox answered in {time.monotonic() - started:.1f}s")
    else:
        parts.append(f"another sandbox NOT healthy: {other.error or other.exit_code}")
    return ", ".join(parts)


@check("RES-003")
def scratch_capped(ctx: Context) -> Verdict:
    handle = ctx.sandbox()
    limit = handle.limits.scratch_bytes
    target = 2 * limit if limit else UNDECLARED_SCRATCH_TARGET
    result = ctx.probe("scratch", {"dir": TMP_DIR, "bytes": target}, timeout=120)
    mount = result.get("mount") or {}
    written = int(result["written"])
    medium = volume_medium(ctx, TMP_DIR)
    text = (
        f"wrote {_mib(written)} to /tmp ({mount.get('fstype')} inside"
        + (f", an emptyDir of medium {medium or 'disk'} in the pod spec" if medium != "?" else "")
        + f"), stopped by {result['stopped']}; declared {_mib(limit)}"
    )
    if result["stopped"] == "reached target":
        return fail(f"no cap: {text}")
    if "ENOSPC" not in str(result["stopped"]) and "EDQUOT" not in str(result["stopped"]):
        return fail(f"stopped by something else than ENOSPC: {text}")
    if limit and written > limit * 1.1 + MiB:
        return fail(f"ENOSPC only above the declared size: {text}")
    if mount.get("fstype") not in ("tmpfs", "ramfs") and medium != "Memory":
        return fail(f"scratch is not memory-backed, so it fills the node's disk: {text}")
    return ok(f"{text}: memory-backed, so the node's disk is untouched")


def _one_core_rate(canaries: Canaries) -> float:
    """Iterations per second of one busy process in an unlimited canary pod."""
    out = canaries.run_in(
        NET,
        ["python3", "-c", source(PROBE), "cpu", json.dumps({"workers": 1, "seconds": 2})],
    )
    baseline = json.loads(out.decode().strip().splitlines()[-1])
    return float(baseline["iterations"]) / float(baseline["seconds"])


@check("RES-004")
def cpu_bounded(ctx: Context) -> Verdict:
    handle = ctx.sandbox()
    limit = handle.limits.cpu_millis
    canaries = ctx.canaries()
    workers, seconds = 4, 4.0
    bound = (limit or 0) / 1000 * 1.5 + 0.15
    tries: list[str] = []
    # The baseline is one unlimited core measured just before and just after the sandbox's
    # run, and the faster of the two is used: on a node whose load changes between the
    # measurements, a slow baseline would make a capped sandbox look uncapped. A second
    # try only on a first result above the bound; a sandbox without a cap exceeds it on
    # both, by far (four busy processes on a node of two or more cores).
    for _ in range(2):
        before = _one_core_rate(canaries)
        result = ctx.probe("cpu", {"workers": workers, "seconds": seconds}, timeout=60)
        per_core = max(before, _one_core_rate(canaries))
        cores = result["iterations"] / (per_core * seconds)
        tries.append(
            f"{workers} busy processes for {seconds:.0f}s got the work of {cores:.2f} cores "
            f"(one unlimited core on the node as baseline; child CPU time "
            f"{result['child_cpu_seconds']}s; cpu.max {result.get('cpu_max')})"
        )
        if limit is None or cores <= bound:
            break
    declared = f"declared {limit}m" if limit else "declared no limit"
    text = "; then ".join(tries) + f"; {declared}"
    if limit is None:
        return fail(f"no CPU limit declared: {text}")
    if cores > bound:
        return fail(f"above the declared share: {text}")
    return ok(text)


@check("RES-005")
def output_capped(ctx: Context) -> Verdict:
    handle = ctx.sandbox()
    cap = handle.limits.output_bytes
    argv = ["python3", "-c", source(PROBE), "flood", json.dumps({"bytes": FLOOD_BYTES})]
    outcome = ctx.exec(argv, timeout=60)
    received = len(outcome.stdout) + len(outcome.stderr)
    text = (
        f"the command wrote {_mib(FLOOD_BYTES)}; the caller received {received} bytes "
        f"in {outcome.duration:.1f}s, truncated flag {outcome.truncated}; declared cap "
        + (f"{cap} bytes" if cap else "none")
    )
    if outcome.error:
        raise CannotRun(f"the exec broke: {outcome.error}")
    if cap is None or received > cap:
        return fail(f"output not capped: {text}")
    if not outcome.truncated:
        return fail(f"output cut without saying so: {text}")
    return ok(text)
