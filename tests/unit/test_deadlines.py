"""Expiry armed per Sandbox: the pure timetable, the pure expiry of one Sandbox, and the
loop reaping at an armed deadline (against the recording fake API server), once."""

from __future__ import annotations

from datetime import datetime, timedelta

from openblox.controller.deadlines import Deadlines
from openblox.controller.reaper import Reaper
from openblox.lifetime.reaping import expiry_of
from openblox.lifetime.timetable import Timetable
from openblox.timestamps import format_timestamp
from tests.unit.factories import CREATED, default_profile, make_sandbox, sandbox_body
from tests.unit.test_operator_loop import (
    FakeKube,
    _operator,
    _watch_everything,
)
from tests.unit.test_operator_loop import (
    _reaper as _wired_reaper,
)

DELETE = ("DELETE", "/apis/openblox.sh/v1alpha1/namespaces/team-a/sandboxes/demo")


def at(seconds: float) -> datetime:
    return CREATED + timedelta(seconds=seconds)


# --------------------------------------------------------------------------- the timetable


def test_keys_come_due_in_order_each_once() -> None:
    table: Timetable[str] = Timetable()
    table.arm("late", at(30))
    table.arm("soon", at(10))
    assert table.pop_due(at(5)) == []
    assert table.next_at() == at(10)
    assert table.pop_due(at(10)) == ["soon"]
    assert table.pop_due(at(100)) == ["late"]
    assert table.pop_due(at(200)) == []
    assert len(table) == 0


def test_re_arming_moves_a_deadline_later_and_the_old_one_never_fires() -> None:
    table: Timetable[str] = Timetable()
    table.arm("idle", at(10))
    table.arm("idle", at(40))  # activity postponed it
    assert table.pop_due(at(20)) == []
    assert table.get("idle") == at(40)
    assert table.pop_due(at(40)) == ["idle"]


def test_a_disarmed_key_never_fires() -> None:
    table: Timetable[str] = Timetable()
    table.arm("gone", at(10))
    table.disarm("gone")
    assert table.pop_due(at(100)) == []


def test_re_arming_many_times_keeps_the_heap_bounded() -> None:
    table: Timetable[int] = Timetable()
    for step in range(10_000):
        table.arm(step % 10, at(step))
    assert len(table) == 10
    assert len(table._heap) <= 2 * 10 + 64 + 1
    assert sorted(table.pop_due(at(10_000))) == list(range(10))


# --------------------------------------------------------------------------- expiry of one


def test_expiry_of_is_the_earlier_deadline_or_none_when_never_reaped() -> None:
    profiles = {"code-exec": default_profile()}  # idle 900 s, max age 3600 s
    expiry = expiry_of(make_sandbox(), profiles, at(0))
    assert expiry is not None and expiry.expires_at == at(900) and expiry.reason == "Idle"
    active = make_sandbox(annotations={"openblox.sh/last-activity": format_timestamp(at(3000))})
    late = expiry_of(active, profiles, at(3000))
    assert late is not None and late.expires_at == at(3600) and late.reason == "MaxAge"
    assert expiry_of(make_sandbox(profile="unknown"), profiles, at(0)) is None
    # More than the profile allows (it was shortened since): held to the profile.
    too_long = make_sandbox(
        spec={"maxAgeSeconds": 999_999},
        annotations={"openblox.sh/last-activity": format_timestamp(at(3000))},
    )
    held = expiry_of(too_long, profiles, at(3000))
    assert held is not None and held.expires_at == at(3600) and held.reason == "MaxAge"


# --------------------------------------------------------------------------- the loop


class Holder:
    leading = True


def _reaper(kube: FakeKube, moment: list[datetime]) -> tuple[Reaper, Deadlines]:
    reconciler, watched, cache = _operator(kube)
    _watch_everything(watched)
    reconciler._clock = lambda: moment[0]
    body = sandbox_body(spec={"maxAgeSeconds": 60})
    # The status patch answers with this Sandbox (the fake's default has no spec).
    kube.objects[f"{DELETE[1]}/status"] = body
    sandbox = cache.upsert(body)
    assert sandbox is not None
    reaper = _wired_reaper(kube, reconciler, cache, election=Holder(), clock=lambda: moment[0])
    reconciler.reconcile(sandbox, "sandbox")
    return reaper, reconciler._deadlines


def test_the_reconcile_arms_the_deadline_and_the_loop_reaps_then_and_only_then() -> None:
    kube, moment = FakeKube(), [at(1)]
    reaper, deadlines = _reaper(kube, moment)
    assert deadlines.get(("team-a", "demo")) == at(60)
    kube.take()
    moment[0] = at(59)
    assert reaper.reap_due() == 0
    assert kube.take() == []  # nothing due: no request, no expiry computed
    moment[0] = at(60.5)
    assert reaper.reap_due() == 1
    calls = kube.take()
    assert calls.count(DELETE) == 1
    # The sweep after it, before the deletion's watch event, does not reap it again.
    assert reaper.reap_once() == 0
    assert DELETE not in kube.take()


def test_a_deadline_that_moved_is_armed_again_not_reaped() -> None:
    kube, moment = FakeKube(), [at(1)]
    reaper, deadlines = _reaper(kube, moment)
    # The Sandbox's deadline is in its spec; a stale arming (earlier than the truth) fires
    # and the loop recomputes, finds it not due, and arms the real one.
    deadlines.arm(("team-a", "demo"), at(30))
    moment[0] = at(31)
    kube.take()
    assert reaper.reap_due() == 0
    assert kube.take() == []
    assert deadlines.get(("team-a", "demo")) == at(60)


def test_the_sweep_reaps_what_no_deadline_was_armed_for() -> None:
    kube, moment = FakeKube(), [at(1)]
    reaper, deadlines = _reaper(kube, moment)
    deadlines.disarm(("team-a", "demo"))
    moment[0] = at(61)
    assert reaper.reap_due() == 0
    kube.take()
    assert reaper.reap_once() == 1
    assert kube.take().count(DELETE) == 1
