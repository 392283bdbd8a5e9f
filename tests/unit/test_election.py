"""The operator's one election: the pure decisions (a Lease as observed, and a clock), and
the fence that keeps a replica that does not hold the Lease from writing anything.

Takeover on a real API server, with two replicas and a killed leader, is
tests/cluster/test_operator_failover.py.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from openblox.controller import metrics
from openblox.controller.election import Election, NotLeader
from openblox.controller.kube import ApiError, Credentials, Kube
from openblox.leadership import (
    Decision,
    LeaseRecord,
    LeaseTiming,
    Sighting,
    decide,
    lease_spec,
    record_of,
    sighted,
    unseen_by_earlier_holders,
)

TIMING = LeaseTiming(duration_seconds=15, renew_deadline_seconds=10, retry_seconds=2)
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
LEASE = "/apis/coordination.k8s.io/v1/namespaces/openblox-system/leases/openblox-operator"


def _record(holder: str = "other", renew: str = "t1", version: str = "1") -> LeaseRecord:
    return LeaseRecord(holder, renew, 15, 0, version)


# --------------------------------------------------------------------------- pure decisions


def test_no_lease_is_created_and_our_own_is_renewed() -> None:
    assert decide(Sighting(None, 0.0), "me", 0.0, TIMING) is Decision.CREATE
    assert decide(Sighting(_record("me"), 0.0), "me", 100.0, TIMING) is Decision.RENEW


def test_a_live_holder_is_waited_for_until_we_have_seen_it_unchanged_for_the_duration() -> None:
    sighting = sighted(None, _record(), now=100.0)
    assert decide(sighting, "me", 100.0, TIMING) is Decision.WAIT
    assert decide(sighting, "me", 114.9, TIMING) is Decision.WAIT
    assert decide(sighting, "me", 115.0, TIMING) is Decision.TAKE


def test_a_renewal_restarts_the_count_and_the_record_s_own_clock_is_never_trusted() -> None:
    first = sighted(None, _record(renew="2020-01-01T00:00:00.000000Z"), now=100.0)
    # Unchanged: the first sighting is kept, so the count runs on.
    assert sighted(first, _record(renew="2020-01-01T00:00:00.000000Z"), now=110.0) is first
    # renewTime years in the past (another machine's clock) decides nothing; a change
    # in the record (a renewal) restarts the count from our own clock.
    renewed = sighted(first, _record(renew="2020-01-01T00:00:02.000000Z", version="2"), 112.0)
    assert renewed.since == 112.0
    assert decide(renewed, "me", 120.0, TIMING) is Decision.WAIT
    assert decide(renewed, "me", 127.0, TIMING) is Decision.TAKE


def test_a_released_lease_is_taken_at_once() -> None:
    assert decide(sighted(None, _record(holder=""), 5.0), "me", 5.0, TIMING) is Decision.TAKE


def test_the_duration_the_record_states_is_the_one_waited_for() -> None:
    short = LeaseRecord("other", "t", 1, 0, "1")
    assert decide(Sighting(short, 0.0), "me", 1.0, TIMING) is Decision.TAKE


def test_the_spec_written_counts_transitions_and_stamps_acquire_only_on_a_change() -> None:
    created = lease_spec(None, "me", "now", TIMING)
    assert created["leaseTransitions"] == 0 and created["acquireTime"] == "now"
    assert created["leaseDurationSeconds"] == 15
    renewed = lease_spec(LeaseRecord("me", "t", 15, 3, "9"), "me", "now", TIMING)
    assert renewed["leaseTransitions"] == 3 and "acquireTime" not in renewed
    taken = lease_spec(LeaseRecord("other", "t", 15, 3, "9"), "me", "now", TIMING)
    assert taken["leaseTransitions"] == 4 and taken["acquireTime"] == "now"


def test_record_of_reads_what_the_api_server_returns() -> None:
    body = {
        "metadata": {"resourceVersion": "42"},
        "spec": {"holderIdentity": "a", "renewTime": "t", "leaseDurationSeconds": 15},
    }
    assert record_of(body) == LeaseRecord("a", "t", 15, 0, "42")
    assert record_of(None) is None
    assert record_of({"metadata": {}, "spec": {}}) == LeaseRecord("", "", None, 0, "")


@pytest.mark.parametrize(("retry", "deadline", "duration"), [(2, 15, 15), (0, 5, 15), (5, 4, 15)])
def test_timings_without_a_margin_are_refused(retry: float, deadline: float, duration: int) -> None:
    with pytest.raises(ValueError, match="retry < renew deadline < duration"):
        LeaseTiming(duration_seconds=duration, renew_deadline_seconds=deadline, retry_seconds=retry)


def test_the_stated_takeover_bound() -> None:
    assert TIMING.takeover_bound_seconds == 19


def test_only_objects_made_a_lease_duration_after_the_take_are_ours_alone() -> None:
    taken = EPOCH
    assert not unseen_by_earlier_holders(taken + timedelta(seconds=30), None, TIMING)
    assert not unseen_by_earlier_holders(taken - timedelta(seconds=1), taken, TIMING)
    # Made within a duration of the take: the clocks may disagree, a request may linger.
    assert not unseen_by_earlier_holders(taken + timedelta(seconds=15), taken, TIMING)
    assert unseen_by_earlier_holders(taken + timedelta(seconds=15.001), taken, TIMING)


# --------------------------------------------------------------------------- the election


class LeaseApi:
    """One Lease with optimistic concurrency, as the API server keeps it: a replace whose
    resourceVersion is not the current one is a 409."""

    def __init__(self) -> None:
        self.body: dict[str, Any] | None = None
        self.version = 0
        self.down = False
        self.writes = 0
        # Returned by the next read after a write: what a racing replica read before it.
        self.stale: dict[str, Any] | None = None

    def get(self, target: str, **_: Any) -> dict[str, Any]:
        assert target == LEASE
        if self.stale is not None and self.writes and self.body is not self.stale:
            stale, self.stale = self.stale, None
            return stale
        if self.down:
            raise ApiError(503, "Unavailable")
        if self.body is None:
            raise ApiError(404, "NotFound")
        return self.body

    def _store(self, body: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        self.writes += 1
        self.body = {**body, "metadata": {**body["metadata"], "resourceVersion": str(self.version)}}
        return self.body

    def post(self, target: str, body: Any) -> dict[str, Any]:
        if self.down:
            raise ApiError(503, "Unavailable")
        if self.body is not None:
            raise ApiError(409, "AlreadyExists")
        return self._store(body)

    def put(self, target: str, body: Any) -> dict[str, Any]:
        if self.down:
            raise ApiError(503, "Unavailable")
        assert self.body is not None
        if body["metadata"].get("resourceVersion") != self.body["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict")
        return self._store(body)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _replica(api: LeaseApi, clock: Clock, name: str) -> Election:
    return Election(
        api,  # type: ignore[arg-type]
        "openblox-operator",
        name,
        TIMING,
        clock=clock,
        wall=lambda: EPOCH + timedelta(seconds=clock.now),
    )


def test_of_two_replicas_one_leads_and_the_other_writes_nothing() -> None:
    api, clock = LeaseApi(), Clock()
    a, b = _replica(api, clock, "a"), _replica(api, clock, "b")
    assert a.step() and a.leading
    assert not b.step() and not b.leading
    a.fence()
    with pytest.raises(NotLeader):
        b.fence()
    for _ in range(20):  # a renews every retry; b never sees the record unchanged long
        clock.now += TIMING.retry_seconds
        assert a.step()
        assert not b.step()
    assert api.body is not None and api.body["spec"]["holderIdentity"] == "a"


def test_a_dead_holder_is_replaced_within_the_stated_bound_and_never_overlaps() -> None:
    api, clock = LeaseApi(), Clock()
    a, b = _replica(api, clock, "a"), _replica(api, clock, "b")
    a.step()
    b.step()
    died = clock.now  # a renewed at `died`, then stops
    while not b.leading:
        clock.now += TIMING.retry_seconds
        b.step()
        # a's fence closes on its own clock at the renew deadline, before b may take it.
        assert not (a.leading and b.leading)
    assert clock.now - died <= TIMING.takeover_bound_seconds
    assert api.body is not None and api.body["spec"]["holderIdentity"] == "b"
    assert api.body["spec"]["leaseTransitions"] == 1


def test_a_holder_cut_off_from_the_api_server_stops_writing_at_its_renew_deadline() -> None:
    api, clock = LeaseApi(), Clock()
    a = _replica(api, clock, "a")
    assert a.step()
    api.down = True
    clock.now += TIMING.renew_deadline_seconds - 0.1
    with pytest.raises(ApiError):
        a.step()
    assert a.leading  # still within the deadline of the last renewal that went through
    clock.now += 0.2
    assert not a.leading
    with pytest.raises(NotLeader):
        a.fence()


def test_a_holder_that_sees_another_holder_stops_at_once() -> None:
    api, clock = LeaseApi(), Clock()
    a = _replica(api, clock, "a")
    a.step()
    assert api.body is not None
    api.body = {**api.body, "spec": {**api.body["spec"], "holderIdentity": "intruder"}}
    assert not a.step()
    assert not a.leading


def test_two_candidates_racing_for_a_free_lease_make_one_holder() -> None:
    api, clock = LeaseApi(), Clock()
    old, b, c = (_replica(api, clock, name) for name in ("old", "b", "c"))
    old.step()
    old.release()
    assert not old.leading
    assert api.body is not None and api.body["spec"]["holderIdentity"] == ""
    # Both read the released record; b's replace lands first, so c's, carrying the
    # same resourceVersion, is a 409 and c stays a standby.
    api.stale = api.body
    assert b.step() and b.leading
    assert not c.step() and not c.leading
    assert api.body["spec"]["holderIdentity"] == "b"
    assert not old.step()  # released for good: a process shutting down never takes it back


def test_a_release_hands_over_at_the_standby_s_next_look() -> None:
    api, clock = LeaseApi(), Clock()
    a, b = _replica(api, clock, "a"), _replica(api, clock, "b")
    a.step()
    b.step()
    a.release()
    clock.now += TIMING.retry_seconds
    assert b.step()


def _write_in_flight(election: Election) -> tuple[threading.Event, threading.Thread]:
    """A write (a hand-out, say) sent and not answered until the event is set."""
    answered, sent = threading.Event(), threading.Event()

    def write() -> None:
        with election.writing():
            sent.set()
            answered.wait(5)

    writer = threading.Thread(target=write)
    writer.start()
    assert sent.wait(5)
    return answered, writer


def test_a_release_waits_for_the_writes_already_sent_before_handing_over() -> None:
    api, clock = LeaseApi(), Clock()
    a = _replica(api, clock, "a")
    a.step()
    answered, writer = _write_in_flight(a)
    released = threading.Event()

    def release() -> None:
        a.release()
        released.set()

    releaser = threading.Thread(target=release)
    releaser.start()
    assert not released.wait(0.3)  # the Lease still names "a" while the write is out
    assert api.body is not None and api.body["spec"]["holderIdentity"] == "a"
    with pytest.raises(NotLeader), a.writing():  # the fence is closed: nothing new goes out
        pass
    answered.set()
    assert released.wait(5)
    writer.join(5)
    releaser.join(5)
    assert api.body["spec"]["holderIdentity"] == ""


def test_a_release_hands_over_after_the_drain_time_even_if_a_write_never_returns() -> None:
    api, clock = LeaseApi(), Clock()
    a = _replica(api, clock, "a")
    a.step()
    answered, writer = _write_in_flight(a)
    a.release(drain_seconds=0.1)
    assert api.body is not None and api.body["spec"]["holderIdentity"] == ""
    answered.set()
    writer.join(5)


def test_a_guarded_client_refuses_a_write_before_sending_it() -> None:
    # Port 1 on loopback: if the guard let the request through it would fail to connect,
    # with a different error.
    kube = Kube(Credentials(server="http://127.0.0.1:1"))

    @contextmanager
    def refuse() -> Iterator[None]:
        raise NotLeader("standby")
        yield

    guarded = kube.guarded(refuse)
    writes: tuple[Callable[[], object], ...] = (
        lambda: guarded.post("/api/v1/namespaces/x/pods", {}),
        lambda: guarded.put("/api/v1/namespaces/x", {}),
        lambda: guarded.patch("/api/v1/namespaces/x", {}),
        lambda: guarded.delete("/api/v1/namespaces/x/pods/p"),
    )
    for write in writes:
        with pytest.raises(NotLeader):
            write()
    with pytest.raises(OSError):  # a read is not guarded: it goes out (and fails here)
        guarded.get("/api/v1/namespaces")


def test_the_fence_counts_what_it_let_through_and_what_it_refused() -> None:
    api, clock = LeaseApi(), Clock()
    a, b = _replica(api, clock, "a"), _replica(api, clock, "b")
    a.step()
    b.step()
    sent = metrics.WRITES.labels("sent")._value.get()
    fenced = metrics.WRITES.labels("fenced")._value.get()
    a.fence()
    with pytest.raises(NotLeader):
        b.fence()
    assert metrics.WRITES.labels("sent")._value.get() == sent + 1
    assert metrics.WRITES.labels("fenced")._value.get() == fenced + 1


def test_held_since_is_the_take_kept_by_renewals_and_gone_with_the_lease() -> None:
    api, clock = LeaseApi(), Clock()
    a, b = _replica(api, clock, "a"), _replica(api, clock, "b")
    assert a.held_since is None
    a.step()
    taken = a.held_since
    assert taken is not None and taken == EPOCH + timedelta(seconds=1000)
    clock.now += TIMING.retry_seconds
    a.step()
    assert a.held_since == taken  # a renewal is not a new take
    assert a.sole_writer_for(taken + timedelta(seconds=TIMING.duration_seconds + 1))
    assert not a.sole_writer_for(taken)
    api.down = True
    clock.now += TIMING.renew_deadline_seconds
    assert a.held_since is None  # lapsed: it vouches for nothing
    assert not a.sole_writer_for(taken + timedelta(seconds=60))
    api.down = False
    b.step()
    while not b.leading:
        clock.now += TIMING.retry_seconds
        b.step()
    a.step()
    assert a.held_since is None and b.held_since == EPOCH + timedelta(seconds=clock.now)
