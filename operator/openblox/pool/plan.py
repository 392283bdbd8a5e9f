"""Pure decisions about a warm pool: its size, the pod to hand out, how fast to refill.

No I/O: the keeper (controller/pool_keeper.py) and the claim (controller/pool_claim.py)
gather what the watches show and act on what these functions decide.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from fractions import Fraction
from typing import Any

from openblox.builders.pod_state import PodState
from openblox.models import Boundary, parse_quantity
from openblox.names import ANNOTATION_BOUNDARY, ANNOTATION_PROFILE_DIGEST
from openblox.timestamps import parse_timestamp

# ResourceQuota keys that a pool pod's requests and limits count against.
_QUOTA_KEYS = {
    "pods": ("count", ""),
    "count/pods": ("count", ""),
    "cpu": ("requests", "cpu"),
    "requests.cpu": ("requests", "cpu"),
    "memory": ("requests", "memory"),
    "requests.memory": ("requests", "memory"),
    "limits.cpu": ("limits", "cpu"),
    "limits.memory": ("limits", "memory"),
    "ephemeral-storage": ("requests", "ephemeral-storage"),
    "requests.ephemeral-storage": ("requests", "ephemeral-storage"),
    "limits.ephemeral-storage": ("limits", "ephemeral-storage"),
}


@dataclass(frozen=True)
class PoolPod:
    """What the decisions need to know of one pod still in a pool."""

    name: str
    digest: str
    created: datetime
    ready: bool = False
    # None: not probed yet; True: the probe saw the profile's boundary; False: it did not.
    boundary_ok: bool | None = None
    terminating: bool = False
    ended: bool = False

    @property
    def starting(self) -> bool:
        return not (self.ready or self.terminating or self.ended)


def pool_pod_view(
    pod: Mapping[str, Any], observed: Boundary | None, expected: Boundary | None
) -> PoolPod:
    """A pool pod as the decisions see it, from the pod (as the watch keeps it) and the
    boundary its probe saw in this process (None: not probed here), else the one an
    earlier probe recorded on the pod."""
    metadata = pod["metadata"]
    if observed is None:
        recorded = (metadata.get("annotations") or {}).get(ANNOTATION_BOUNDARY)
        observed = recorded if recorded in ("gvisor", "kata", "none") else None
    state = PodState.from_pod(pod)
    return PoolPod(
        name=str(metadata["name"]),
        digest=str((metadata.get("annotations") or {}).get(ANNOTATION_PROFILE_DIGEST, "")),
        created=parse_timestamp(str(metadata["creationTimestamp"])),
        ready=state.ready and not state.terminated,
        boundary_ok=None if observed is None else (expected is None or observed == expected),
        terminating=bool(metadata.get("deletionTimestamp")),
        ended=state.terminated,
    )


@dataclass(frozen=True)
class Plan:
    create: int
    delete: tuple[str, ...]
    # Ready pods that still need the boundary probe before they may be handed out.
    probe: tuple[str, ...]


def pod_footprint(
    pod: Mapping[str, Any], overhead: Mapping[str, str] | None = None
) -> tuple[dict[str, Fraction], dict[str, Fraction]]:
    """A pod manifest's requests and limits as a quota counts them: summed over its
    containers, plus the RuntimeClass's pod overhead (which quota counts too)."""
    requests: dict[str, Fraction] = {}
    limits: dict[str, Fraction] = {}
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        for target, key in ((requests, "requests"), (limits, "limits")):
            for name, text in (resources.get(key) or {}).items():
                target[name] = target.get(name, Fraction(0)) + parse_quantity(str(text))
    for name, text in (overhead or {}).items():
        for target in (requests, limits):
            target[name] = target.get(name, Fraction(0)) + parse_quantity(str(text))
    return requests, limits


def pods_per_quota(
    hard: Mapping[str, str], requests: Mapping[str, Fraction], limits: Mapping[str, Fraction]
) -> int | None:
    """How many pods with these requests and limits one ResourceQuota's hard limits hold
    (None: the quota limits nothing a pod uses). A quantity that cannot be read limits
    nothing here: the API server still enforces the quota on every create."""
    fits: list[int] = []
    for key, text in hard.items():
        kind, resource = _QUOTA_KEYS.get(key, ("", ""))
        if not kind:
            continue
        try:
            total = parse_quantity(str(text))
        except ValueError:
            continue
        if kind == "count":
            fits.append(max(0, math.floor(total)))
            continue
        per_pod = (requests if kind == "requests" else limits).get(resource)
        if per_pod is not None and per_pod > 0:
            fits.append(max(0, math.floor(total / per_pod)))
    return min(fits) if fits else None


def plan_pool(size: int, pods: Iterable[PoolPod], digest: str, creatable: int) -> Plan:
    """Make the pool `size` pods of the current profile digest, creating at most `creatable`.

    A pod of an older digest is never handed out, so it goes at once; so does one whose
    boundary probe failed or that ended. Beyond `size`, starting pods go before ready
    ones, the youngest first.
    """
    delete: list[str] = []
    keep: list[PoolPod] = []
    for pod in pods:
        if pod.terminating:
            continue
        if pod.digest != digest or pod.ended or pod.boundary_ok is False:
            delete.append(pod.name)
        else:
            keep.append(pod)
    keep.sort(key=lambda p: (p.starting, p.created), reverse=False)
    surplus = keep[size:]
    keep = keep[:size]
    delete.extend(p.name for p in reversed(surplus))
    probe = tuple(p.name for p in keep if p.ready and p.boundary_ok is None)
    create = max(0, min(size - len(keep), creatable))
    return Plan(create=create, delete=tuple(delete), probe=probe)


def choose_pod(pods: Iterable[PoolPod], digest: str, taken: Iterable[str] = ()) -> PoolPod | None:
    """The pod to hand out: ready, its boundary checked, of the current digest, not taken
    by a hand-out in flight. The longest-warm goes first, so none grows stale."""
    excluded = set(taken)
    ready = [p for p in pods if can_hand_out(p, digest) and p.name not in excluded]
    return min(ready, key=lambda p: (p.created, p.name)) if ready else None


def can_hand_out(pod: PoolPod, digest: str) -> bool:
    """Ready, its boundary checked, of the current digest, not going away."""
    return (
        pod.ready
        and pod.boundary_ok is True
        and pod.digest == digest
        and not pod.terminating
        and not pod.ended
    )


@dataclass
class RefillPacer:
    """A token bucket: pool pods are created at most `rate` a second, `burst` at once,
    and never with more than `in_flight` of a pool's pods still starting. The node's boot
    rate bounds refill (about 1.3 gVisor pods/s on two cores); more starting at once only
    queues them in the kubelet and slows every start (docs/pools.md has the figures)."""

    rate: float = 4.0
    burst: int = 8
    in_flight: int = 8
    # While hand-outs are coming and the pool still has pods to hand out, refill waits up
    # to this long: pods booting during a burst of claims take the cores the claims need.
    hold_seconds: float = 0.5
    _tokens: dict[str, float] = field(default_factory=dict)
    _last: dict[str, float] = field(default_factory=dict)
    _held_since: dict[str, float] = field(default_factory=dict)

    def allowance(
        self,
        key: str,
        now: float,
        starting: int,
        *,
        handed_out_at: float | None = None,
        ready: int = 0,
    ) -> int:
        """Creates allowed for one pool in one namespace now, before any is spent.

        `handed_out_at` is the last hand-out from this pool (same clock as `now`) and
        `ready` how many pods it can still hand out. Refill is held while hand-outs are
        recent and pods remain, but never longer than `hold_seconds` at a stretch, so a
        steady stream of claims still gets a refill round every `hold_seconds`."""
        tokens = self._tokens.get(key, float(self.burst))
        last = self._last.get(key, now)
        tokens = min(float(self.burst), tokens + max(0.0, now - last) * self.rate)
        self._tokens[key], self._last[key] = tokens, now
        busy = handed_out_at is not None and now - handed_out_at < self.hold_seconds
        if busy and ready > 0:
            since = self._held_since.setdefault(key, now)
            if now - since < self.hold_seconds:
                return 0
        self._held_since.pop(key, None)
        return max(0, min(math.floor(tokens), self.in_flight - starting))

    def spend(self, key: str, created: int) -> None:
        self._tokens[key] = max(0.0, self._tokens.get(key, 0.0) - created)

    def forget(self, keys: Sequence[str]) -> None:
        for key in keys:
            self._tokens.pop(key, None)
            self._last.pop(key, None)
            self._held_since.pop(key, None)
