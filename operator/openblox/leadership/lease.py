"""The election's arithmetic: what a replica does, given the Lease it saw and its own clock.

Pure: no I/O, no clock of its own. Time is two numbers the caller passes in, a monotonic
reading (how long this replica has seen a record unchanged) and, only for the record it
writes, wall-clock text.

A record's `renewTime` is another machine's wall clock, so it is never compared with
ours: a candidate takes the Lease only after it has *itself* watched the record stay
unchanged for the record's whole duration (the rule client-go's leader election uses).
A holder stops writing at its renew deadline, measured from the moment it *sent* its
last successful renewal, which is shorter than the duration: the gap is the margin in
which no replica writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum
from typing import Any


@dataclass(frozen=True, slots=True)
class LeaseTiming:
    """How long a record holds, when the holder gives up, how often everyone looks."""

    duration_seconds: int = 15
    renew_deadline_seconds: float = 10.0
    retry_seconds: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_seconds < self.renew_deadline_seconds < self.duration_seconds:
            raise ValueError(
                "need 0 < retry < renew deadline < duration, got "
                f"{self.retry_seconds}, {self.renew_deadline_seconds}, {self.duration_seconds}"
            )

    @property
    def takeover_bound_seconds(self) -> float:
        """The longest a dead holder leaves the Lease unclaimed: its last renewal may be
        seen up to one retry late, the duration must then pass, and the candidate looks
        once a retry."""
        return self.duration_seconds + 2 * self.retry_seconds


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """What matters of a coordination.k8s.io Lease as the API server returned it."""

    holder: str
    renew_time: str
    duration_seconds: int | None
    transitions: int
    resource_version: str


def record_of(body: Mapping[str, Any] | None) -> LeaseRecord | None:
    if body is None:
        return None
    spec = body.get("spec") or {}
    duration = spec.get("leaseDurationSeconds")
    return LeaseRecord(
        holder=str(spec.get("holderIdentity") or ""),
        renew_time=str(spec.get("renewTime") or ""),
        duration_seconds=int(duration) if duration else None,
        transitions=int(spec.get("leaseTransitions") or 0),
        resource_version=str((body.get("metadata") or {}).get("resourceVersion") or ""),
    )


@dataclass(frozen=True, slots=True)
class Sighting:
    """A record, and the monotonic moment this replica first saw it as it is."""

    record: LeaseRecord | None
    since: float


def sighted(previous: Sighting | None, record: LeaseRecord | None, now: float) -> Sighting:
    """Keep the first sighting while the record is unchanged; a change restarts the count."""
    if previous is not None and _same(previous.record, record):
        return previous
    return Sighting(record, now)


def _same(a: LeaseRecord | None, b: LeaseRecord | None) -> bool:
    if a is None or b is None:
        return a is b
    return (a.holder, a.renew_time, a.resource_version) == (
        b.holder,
        b.renew_time,
        b.resource_version,
    )


class Decision(Enum):
    CREATE = "create"  # no Lease yet: make it, holding it
    RENEW = "renew"  # ours: renew it
    TAKE = "take"  # free, released or expired: replace it, carrying its resourceVersion
    WAIT = "wait"  # another live holder: stand by, write nothing


def decide(sighting: Sighting, me: str, now: float, timing: LeaseTiming) -> Decision:
    record = sighting.record
    if record is None:
        return Decision.CREATE
    if record.holder == me:
        return Decision.RENEW
    if not record.holder:
        return Decision.TAKE
    duration = record.duration_seconds or timing.duration_seconds
    if now - sighting.since >= duration:
        return Decision.TAKE
    return Decision.WAIT


def lease_spec(
    record: LeaseRecord | None, me: str, wall_now: str, timing: LeaseTiming
) -> dict[str, Any]:
    """The spec to write when this replica creates, renews or takes the Lease."""
    ours = record is not None and record.holder == me
    transitions = 0 if record is None else record.transitions + (0 if ours else 1)
    spec: dict[str, Any] = {
        "holderIdentity": me,
        "leaseDurationSeconds": timing.duration_seconds,
        "renewTime": wall_now,
        "leaseTransitions": transitions,
    }
    if not ours:
        spec["acquireTime"] = wall_now
    return spec


def released_spec(record: LeaseRecord, wall_now: str) -> dict[str, Any]:
    """What a holder that is shutting down writes, so a standby takes over at its next look
    instead of waiting out the duration."""
    return {
        "holderIdentity": "",
        "leaseDurationSeconds": 1,
        "renewTime": wall_now,
        "leaseTransitions": record.transitions,
    }


def unseen_by_earlier_holders(
    created_at: datetime, held_since: datetime | None, timing: LeaseTiming
) -> bool:
    """Whether an object created at `created_at` (the API server's clock) can only have
    been acted on by the replica holding the Lease since `held_since` (its own clock).

    An earlier holder stopped writing before the Lease passed on, and acts only on
    objects it has seen; one whole Lease duration of margin covers the two clocks
    disagreeing and an earlier holder's request still in flight."""
    if held_since is None:
        return False
    return created_at > held_since + timedelta(seconds=timing.duration_seconds)
