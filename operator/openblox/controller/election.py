"""The operator's one election: a coordination.k8s.io Lease decides which replica writes.

Every replica watches and caches (a standby is warm, so a takeover needs no relist);
only the holder reconciles, reaps, runs requeues and publishes the admission
parameters. Every write the operator sends is inside `writing()` (the `Kube` write
guard), which passes `fence()` first, so a replica that has stopped holding writes
nothing, even from a reconcile that was already running; and a replica shutting down
hands the Lease over only once the writes already sent have been answered. The
arithmetic is `openblox.leadership` (pure).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from openblox.controller import metrics
from openblox.controller.kube import Kube, is_conflict, is_not_found, path
from openblox.leadership import (
    Decision,
    LeaseTiming,
    Sighting,
    decide,
    lease_spec,
    record_of,
    released_spec,
    sighted,
    unseen_by_earlier_holders,
)
from openblox.names import OPERATOR_NAMESPACE
from openblox.timestamps import format_micro_timestamp

log = logging.getLogger(__name__)

# On shutdown, the Lease is handed over once the writes already sent are answered, but
# after this long at most: well inside the pod's 10 s grace period, after which the
# kubelet kills the process and the standby would wait out the whole Lease instead.
DRAIN_SECONDS = 5.0


class NotLeader(Exception):
    """A write was refused because this replica does not hold the Lease."""


def _wall() -> datetime:
    return datetime.now(UTC)


class Election:
    def __init__(
        self,
        kube: Kube,
        name: str,
        identity: str,
        timing: LeaseTiming | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = _wall,
    ) -> None:
        self._kube = kube  # unfenced: the Lease itself is the one write a standby makes
        self._name = name
        self.identity = identity
        self.timing = timing or LeaseTiming()
        self._clock = clock
        self._wall = wall
        self._lock = threading.Lock()
        # Writes that passed the fence and have not been answered yet.
        self._in_flight = 0
        self._answered = threading.Condition(self._lock)
        self._sighting: Sighting | None = None
        # Monotonic moment until which this replica may write; 0 while it stands by.
        self._leading_until = 0.0
        # Wall-clock moment this replica last took the Lease from no one or another
        # replica (a renewal keeps it); None while it stands by.
        self._taken_at: datetime | None = None
        self._released = False  # shutting down: never take the Lease again

    @property
    def leading(self) -> bool:
        with self._lock:
            return self._clock() < self._leading_until

    @property
    def held_since(self) -> datetime | None:
        """When this replica took the Lease it holds now (wall clock), or None if it does
        not hold it: no other replica has written anything since then."""
        with self._lock:
            return self._taken_at if self._clock() < self._leading_until else None

    def sole_writer_for(self, created_at: datetime) -> bool:
        """True if no replica but this one can have written anything about an object the
        API server created at `created_at`."""
        return unseen_by_earlier_holders(created_at, self.held_since, self.timing)

    def fence(self) -> None:
        """Raise NotLeader unless this replica holds the Lease now (called before writes)."""
        if not self.leading:
            metrics.WRITES.labels("fenced").inc()
            raise NotLeader(f"{self.identity} does not hold the Lease {self._name}")
        metrics.WRITES.labels("sent").inc()

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Around one write: refused unless this replica holds the Lease, and counted
        until its answer came, so a release never overlaps a write still on its way."""
        self.fence()
        with self._lock:
            self._in_flight += 1
        try:
            yield
        finally:
            with self._lock:
                self._in_flight -= 1
                self._answered.notify_all()

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set() and not self._released:
            try:
                self.step()
            except Exception:
                log.exception("election step failed; trying again")
            metrics.LEADER.set(1 if self.leading else 0)
            stop.wait(self.timing.retry_seconds)

    def _path(self, name: str | None = None) -> str:
        return path(
            group="coordination.k8s.io", plural="leases", namespace=OPERATOR_NAMESPACE, name=name
        )

    def step(self) -> bool:
        """Look at the Lease once; create, renew or take it if this replica may. True
        while this replica holds it."""
        if self._released:
            return False
        sent = self._clock()
        try:
            body = self._kube.get(self._path(self._name))
        except Exception as error:
            if not is_not_found(error):
                raise
            body = None
        record = record_of(body)
        # Seen when the answer came, not when asked: a standby counts no time it cannot
        # be sure of; the holder's own deadline counts from when it asked (above).
        seen = self._clock()
        self._sighting = sighted(self._sighting, record, seen)
        decision = decide(self._sighting, self.identity, seen, self.timing)
        if decision is Decision.WAIT:
            self._stand_by(record.holder if record else "")
            return False
        spec = lease_spec(record, self.identity, format_micro_timestamp(self._wall()), self.timing)
        if self._released:
            return False
        try:
            if body is None:
                self._kube.post(
                    self._path(),
                    {
                        "apiVersion": "coordination.k8s.io/v1",
                        "kind": "Lease",
                        "metadata": {"name": self._name, "namespace": OPERATOR_NAMESPACE},
                        "spec": spec,
                    },
                )
            else:
                # The replace carries resourceVersion: of two replicas, one wins.
                self._kube.put(self._path(self._name), {**body, "spec": spec})
        except Exception as error:
            if not is_conflict(error):
                raise
            # Someone wrote first. If it was not us renewing, the next look shows who.
            return self.leading
        self._lead(sent, taken=decision is not Decision.RENEW)
        return True

    def _lead(self, sent: float, *, taken: bool) -> None:
        with self._lock:
            if self._released:
                return  # a renewal that crossed the release: shutting down all the same
            # From when the renewal was sent, not answered: a slow answer eats our margin.
            self._leading_until = sent + self.timing.renew_deadline_seconds
            if taken or self._taken_at is None:
                self._taken_at = self._wall()
        if taken:
            log.info("%s now holds the Lease %s", self.identity, self._name)

    def _stand_by(self, holder: str) -> None:
        with self._lock:
            was = self._clock() < self._leading_until
            self._leading_until = 0.0
            self._taken_at = None
        if was:
            log.warning("lost the Lease %s to %s; writing nothing from now on", self._name, holder)

    def release(self, drain_seconds: float = DRAIN_SECONDS) -> None:
        """On shutdown: stop writing, wait for the writes already sent to be answered,
        then hand the Lease over so a standby need not wait.

        Without the wait, a hand-out sent just before could land after the standby took
        over and made the Sandbox a cold pod of its own."""
        with self._lock:
            self._released = True
            was = self._clock() < self._leading_until
            self._leading_until = 0.0
            self._taken_at = None
            drained = self._answered.wait_for(lambda: self._in_flight == 0, drain_seconds)
            left = self._in_flight
        metrics.LEADER.set(0)
        if not was:
            return
        if not drained:
            log.warning("releasing the Lease with %d writes still unanswered", left)
        try:
            body = self._kube.get(self._path(self._name))
            record = record_of(body)
            if record is None or record.holder != self.identity:
                return
            self._kube.put(
                self._path(self._name),
                {**body, "spec": released_spec(record, format_micro_timestamp(self._wall()))},
            )
            log.info("released the Lease %s", self._name)
        except Exception:
            log.warning("could not release the Lease %s", self._name, exc_info=True)
