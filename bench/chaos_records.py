"""What the chaos section records and how it judges it: each attempt's outcome and the
reason a failure gives, the faults and when each healed, the invariants over the cluster's
Sandboxes and pods. Pure: no cluster, so it is unit-tested.

An error is *explained* when its type says what happened and its message says why: the
client's typed errors, the API server's refusals (with their status), and the network
errors a caller gets when the API server does not answer. Anything else, a command that
answered wrongly, and a file that read back different while its pod lived, is not.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from bench.stats import percentile
from openblox.client.errors import (
    ExecTransportError,
    FileOperationError,
    OpenbloxClientError,
    SandboxGone,
    SandboxNotReady,
    SandboxStalled,
    SandboxTimeout,
)
from openblox.transport import ApiError

POOL_LABEL = "openblox.sh/pool"
SANDBOX_LABEL = "openblox.sh/sandbox"
# How long the cluster may show a Sandbox Ready without exactly one live pod, or keep
# one past its deadline, under these faults: no operator can act while the Lease changes
# hands (15 s, renewed every 2 s) or while the API server or etcd restarts (up to about
# 30 s here), and then a reconcile or a reaper pass must run. Shorter stretches are
# counted and the longest is reported; only longer ones break the promise.
FAULT_BOUND_SECONDS = 60.0


@dataclass(frozen=True)
class Attempt:
    """One claim, exec or file round trip."""

    kind: str
    """`claim`, `exec` or `file`."""
    started: float
    """Seconds from the start of the run."""
    seconds: float
    ok: bool
    reason: str = ""
    """Why it failed, as the error named it (empty when it succeeded)."""
    explained: bool = True
    warm: bool | None = None
    """For a claim: it was handed a pool pod."""
    cold_namespace: bool = False


def classify(error: BaseException) -> tuple[str, bool]:
    """(the reason a failed call gives, whether that reason is explained)."""
    if isinstance(error, SandboxNotReady):
        return f"not ready: {error.reason}", True
    if isinstance(error, SandboxTimeout):
        return f"timed out (last reason {error.reason})", error.reason is not None
    if isinstance(error, SandboxGone):
        because = f": {error.record.because}" if error.record is not None else ""
        return f"sandbox or pod gone{because}", True
    if isinstance(error, SandboxStalled):
        return f"ended by gVisor after a stall (signal {error.signal})", True
    if isinstance(error, ExecTransportError):
        status = error.status_code
        return f"exec stream broke ({status if status else 'no status'})", True
    if isinstance(error, FileOperationError):
        return f"file operation failed: {str(error)[:80]}", True
    if isinstance(error, OpenbloxClientError):
        return f"client: {type(error).__name__}", True
    if isinstance(error, ApiError):
        named = error.status_reason or error.reason or "no reason"
        return f"API {error.status} {named}", True
    if isinstance(error, OSError):
        # ConnectionRefusedError, TimeoutError, ssl.SSLError: the API server did not answer.
        return f"API unreachable ({type(error).__name__})", True
    return f"unexplained {type(error).__name__}: {str(error)[:120]}", False


@dataclass
class Fault:
    kind: str
    injected: float
    """Seconds from the start of the run."""
    healthy: float | None = None
    """When the part that was broken answered again (None: not within the bound)."""
    recovered: float | None = None
    """When the first claim cycle started after the fault completed whole."""
    note: str = ""

    def window(self, fallback: float) -> tuple[float, float]:
        """The stretch of the run this fault disturbed: until recovery, else `fallback`."""
        end = self.recovered if self.recovered is not None else self.injected + fallback
        return self.injected, max(end, self.healthy or end)


def during(started: float, faults: Sequence[Fault], fallback: float) -> bool:
    return any(lo <= started <= hi for lo, hi in (f.window(fallback) for f in faults))


def first_success_after(injected: float, cycles: Iterable[tuple[float, float, bool]]) -> float:
    """When the first cycle (started, finished, whole) that started at or after
    `injected` and came through whole finished; NaN if none did."""
    ends = [end for start, end, whole in cycles if whole and start >= injected]
    return min(ends) if ends else float("nan")


def _p(values: Sequence[float], q: float) -> float | None:
    return round(percentile(values, q), 1) if values else None


def tally(attempts: Sequence[Attempt], kind: str) -> dict[str, Any]:
    mine = [a for a in attempts if a.kind == kind]
    failed: dict[str, int] = {}
    for attempt in mine:
        if not attempt.ok:
            failed[attempt.reason] = failed.get(attempt.reason, 0) + 1
    return {
        "attempted": len(mine),
        "succeeded": sum(1 for a in mine if a.ok),
        "failed": dict(sorted(failed.items(), key=lambda kv: -kv[1])),
    }


def claim_latency(
    attempts: Sequence[Attempt], faults: Sequence[Fault], fallback: float
) -> dict[str, list[float]]:
    """Claim milliseconds of the successful claims, by whether each was handed a warm pod
    and whether it started inside a fault's window: `warm.quiet`, `cold.faults`, ..."""
    split: dict[str, list[float]] = {
        f"{pod}.{when}": [] for pod in ("warm", "cold") for when in ("quiet", "faults")
    }
    for attempt in attempts:
        if attempt.kind == "claim" and attempt.ok:
            pod = "warm" if attempt.warm else "cold"
            when = "faults" if during(attempt.started, faults, fallback) else "quiet"
            split[f"{pod}.{when}"].append(attempt.seconds * 1000)
    return split


def summary(values: Sequence[float]) -> dict[str, Any]:
    return {"n": len(values), "p50": _p(values, 50), "p99": _p(values, 99)}


# --------------------------------------------------------------------------- invariants


def _live(pod: Mapping[str, Any]) -> bool:
    return not pod["metadata"].get("deletionTimestamp") and (pod.get("status") or {}).get(
        "phase"
    ) not in ("Succeeded", "Failed")


def _ready(sandbox: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (sandbox.get("status") or {}).get("conditions") or []
    )


def _owner(pod: Mapping[str, Any]) -> str | None:
    for ref in pod["metadata"].get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == "Sandbox":
            return str(ref["uid"])
    return None


def ready_without_one_pod(
    sandboxes: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]]
) -> dict[str, int]:
    """Sandbox uid -> how many live pods it owns, for each Ready Sandbox that owns not
    exactly one."""
    owned: dict[str, int] = {}
    for pod in pods:
        owner = _owner(pod)
        if owner and _live(pod):
            owned[owner] = owned.get(owner, 0) + 1
    found = {}
    for sandbox in sandboxes:
        uid = str(sandbox["metadata"]["uid"])
        live = _ready(sandbox) and not sandbox["metadata"].get("deletionTimestamp")
        if live and owned.get(uid, 0) != 1:
            found[uid] = owned.get(uid, 0)
    return found


def _past_deadline(sandbox: Mapping[str, Any], now: float) -> bool:
    """Past `status.expiresAt` (epoch seconds `now`): its pod is failed by its own
    deadline then, and how soon it goes is the reaper's figure, not this one."""
    value = (sandbox.get("status") or {}).get("expiresAt")
    if not value:
        return False
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp() <= now


@dataclass
class Ledger:
    """What the audits saw over the run: hand-outs, and stretches of time in which a
    Ready Sandbox did not have exactly one live pod (a violation when one lasted past
    FAULT_BOUND_SECONDS)."""

    owners: dict[str, set[str]] = field(default_factory=dict)
    """Pod uid -> every Sandbox uid that ever owned it, as the audits saw."""
    handed: dict[str, set[str]] = field(default_factory=dict)
    """Pod uid -> every Sandbox a client was handed it for."""
    since: dict[str, float] = field(default_factory=dict)
    """Sandbox uid -> when its current stretch began."""
    violations: dict[str, str] = field(default_factory=dict)
    stretches: int = 0
    longest: float = 0.0
    audits: int = 0

    def observe(
        self, sandboxes: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]], now: float
    ) -> None:
        """One audit's lists, read at `now` (epoch seconds)."""
        self.audits += 1
        names = {str(s["metadata"]["uid"]): s["metadata"]["name"] for s in sandboxes}
        for pod in pods:
            owner = _owner(pod)
            if owner:
                self.owners.setdefault(str(pod["metadata"]["uid"]), set()).add(owner)
        current = [s for s in sandboxes if not _past_deadline(s, now)]
        found = ready_without_one_pod(current, pods)
        for uid in [u for u in self.since if u not in found]:
            del self.since[uid]
        for uid, count in found.items():
            if uid not in self.since:
                self.since[uid] = now
                self.stretches += 1
            lasted = now - self.since[uid]
            self.longest = max(self.longest, lasted)
            if lasted > FAULT_BOUND_SECONDS:
                self.violations[uid] = (
                    f"{names.get(uid, uid)} Ready with {count} live pods for {lasted:.0f} s"
                )

    def claimed(self, pod_uid: str, sandbox: str) -> None:
        """A hand-out a client saw: the pod its Sandbox (`namespace/name`, unique in a
        run) named when it came back Ready."""
        self.handed.setdefault(pod_uid, set()).add(sandbox)

    def handed_twice(self) -> list[str]:
        twice = {pod for pod, owners in self.owners.items() if len(owners) > 1}
        twice |= {pod for pod, sandboxes in self.handed.items() if len(sandboxes) > 1}
        return sorted(twice)


def orphans(sandboxes: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]]) -> list[str]:
    """Sandbox pods whose Sandbox is gone and that are not on their way out."""
    alive = {str(s["metadata"]["uid"]) for s in sandboxes}
    found = []
    for pod in pods:
        labels = pod["metadata"].get("labels") or {}
        if not labels.get(SANDBOX_LABEL) or not _live(pod):
            continue
        owner = _owner(pod)
        if owner is None or owner not in alive:
            found.append(str(pod["metadata"]["name"]))
    return sorted(found)


def leaked_pool_pods(pods: Sequence[Mapping[str, Any]], pool: str, size: int) -> list[str]:
    """Live pods of the pool past its size, and live pods that belong to neither a pool
    nor a Sandbox."""
    members = sorted(
        str(p["metadata"]["name"])
        for p in pods
        if (p["metadata"].get("labels") or {}).get(POOL_LABEL) == pool and _live(p)
    )
    stray = sorted(
        str(p["metadata"]["name"])
        for p in pods
        if _live(p)
        and not (p["metadata"].get("labels") or {}).get(POOL_LABEL)
        and _owner(p) is None
    )
    return members[size:] + stray


def stuck(sandboxes: Sequence[Mapping[str, Any]]) -> list[str]:
    """Sandboxes not Ready whose Ready condition gives no reason or no message."""
    found = []
    for sandbox in sandboxes:
        if _ready(sandbox):
            continue
        conditions = (sandbox.get("status") or {}).get("conditions") or []
        ready: Mapping[str, Any] = next((c for c in conditions if c.get("type") == "Ready"), {})
        if not ready.get("reason") or not ready.get("message"):
            found.append(str(sandbox["metadata"]["name"]))
    return sorted(found)
