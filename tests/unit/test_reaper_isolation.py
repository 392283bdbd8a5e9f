"""The reaper's rule: one bad Sandbox costs that Sandbox, never the pass.

Against the recording fake API server: several Sandboxes come due in one pass, one of
them bad in a way a tenant (or an unlucky API server) can arrange; every other one is
still reaped in that pass, and the bad one is tried again shortly.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta
from typing import Any

import pytest

from openblox.controller import metrics
from openblox.controller.reaper import REAP_AT_ONCE, REAP_RETRY_SECONDS, Reaper
from openblox.lifetime.reaping import expiry_of
from openblox.models import parse_sandbox
from tests.unit.factories import CREATED, default_profile, make_sandbox, sandbox_body
from tests.unit.test_deadlines import Holder
from tests.unit.test_operator_loop import FakeKube, _operator, _reaper, _uid, _watch_everything

SANDBOXES = "/apis/openblox.sh/v1alpha1/namespaces/team-a/sandboxes"
NAMES = ("first", "poisoned", "refused", "padded", "last")
# Valid RFC 3339, but at +01:00 the first moment of year 1 lies before anything a
# datetime can hold in UTC; formatting it once overflowed inside the pass.
EDGE_OF_THE_CALENDAR = "0001-01-01T00:00:00+01:00"


def at(seconds: float) -> datetime:
    return CREATED + timedelta(seconds=seconds)


def _pass_with_every_kind_of_bad_sandbox() -> tuple[FakeKube, Reaper, list[datetime]]:
    kube = FakeKube()
    reconciler, watched, cache = _operator(kube)
    _watch_everything(watched)
    moment = [at(1)]
    reconciler._clock = lambda: moment[0]
    for name in NAMES:
        annotations = {"openblox.sh/last-activity": EDGE_OF_THE_CALENDAR}
        body = sandbox_body(
            name=name,
            uid=_uid(name),
            spec={"maxAgeSeconds": 60},
            annotations=annotations if name == "poisoned" else None,
        )
        kube.objects[f"{SANDBOXES}/{name}/status"] = body
        sandbox = cache.upsert(body)
        assert sandbox is not None
        reconciler.reconcile(sandbox, "sandbox")
    # The API server refuses one delete outright, and one status patch (a body padded
    # near etcd's object size cannot take its Expired condition).
    kube.errors[("DELETE", f"{SANDBOXES}/refused")] = 500
    kube.errors[("PATCH", f"{SANDBOXES}/padded/status")] = 413
    reaper = _reaper(kube, reconciler, cache, election=Holder(), clock=lambda: moment[0])
    kube.take()
    return kube, reaper, moment


def _deleted(calls: list[tuple[str, str]]) -> set[str]:
    return {
        target.rsplit("/", 1)[1]
        for method, target in calls
        if method == "DELETE" and target.startswith(SANDBOXES)
    }


def test_a_stamp_at_the_edge_of_the_calendar_counts_as_no_activity() -> None:
    poisoned = make_sandbox(annotations={"openblox.sh/last-activity": EDGE_OF_THE_CALENDAR})
    assert poisoned.last_activity is None
    expiry = expiry_of(poisoned, {"code-exec": default_profile()}, at(901))
    assert expiry is not None and expiry.expired and expiry.reason == "Idle"


@pytest.mark.parametrize("which", ["reap_due", "reap_once"])
def test_every_sandbox_due_is_reaped_in_the_pass_whatever_one_of_them_does(which: str) -> None:
    kube, reaper, moment = _pass_with_every_kind_of_bad_sandbox()
    errors_before = metrics.REAP_ERRORS._value.get()
    moment[0] = at(61)
    reaped = getattr(reaper, which)()
    calls = kube.take()
    attempted = _deleted(calls) | {"refused"}
    assert attempted == set(NAMES), f"not every due Sandbox was tried: {sorted(attempted)}"
    # The padded one's Expired status could not be written; it went all the same.
    assert {"first", "poisoned", "padded", "last"} <= _deleted(calls)
    assert reaped == 4
    assert metrics.REAP_ERRORS._value.get() == errors_before + 1
    # The refused one costs itself only: tried again in a few seconds.
    deadlines = reaper._deadlines
    assert deadlines.get(("team-a", "refused")) == at(61 + REAP_RETRY_SECONDS)


def test_the_refused_one_is_reaped_once_the_api_server_takes_its_delete() -> None:
    kube, reaper, moment = _pass_with_every_kind_of_bad_sandbox()
    moment[0] = at(61)
    reaper.reap_due()
    del kube.errors[("DELETE", f"{SANDBOXES}/refused")]
    kube.take()
    moment[0] = at(61 + REAP_RETRY_SECONDS)
    assert reaper.reap_due() == 1
    assert _deleted(kube.take()) == {"refused"}


def test_a_profile_shortened_since_holds_the_sandbox_to_the_new_bound() -> None:
    profiles = {"code-exec": default_profile()}  # idle 900 s, max age 3600 s
    asks_more = make_sandbox(spec={"maxAgeSeconds": 999_999, "idleTimeoutSeconds": 99_999})
    expiry = expiry_of(asks_more, profiles, at(0))
    assert expiry is not None and expiry.expires_at == at(900) and expiry.reason == "Idle"


def test_a_sandbox_whose_profile_is_gone_keeps_the_deadline_its_status_recorded() -> None:
    recorded = parse_sandbox(
        sandbox_body(profile="deleted", status={"expiresAt": "2025-01-02T04:04:05Z"})
    )
    expiry = expiry_of(recorded, {}, at(3600))
    assert expiry is not None and expiry.expired and expiry.reason == "MaxAge"
    assert expiry_of(make_sandbox(profile="never-existed"), {}, at(0)) is None
    garbled = parse_sandbox(sandbox_body(profile="deleted", status={"expiresAt": "soon"}))
    assert expiry_of(garbled, {}, at(0)) is None


class SlowDeletes(FakeKube):
    """Each delete takes a while, and the most at once is counted."""

    def __init__(self) -> None:
        super().__init__()
        self._guard = threading.Lock()
        self.in_flight = 0
        self.most_at_once = 0

    def delete(self, target: str, body: Any = None) -> dict[str, Any]:
        with self._guard:
            self.in_flight += 1
            self.most_at_once = max(self.most_at_once, self.in_flight)
        time.sleep(0.02)
        with self._guard:
            self.in_flight -= 1
        return super().delete(target, body)


def test_a_mass_expiry_is_reaped_several_at_once_but_no_more_than_the_bound() -> None:
    kube = SlowDeletes()
    reconciler, watched, cache = _operator(kube)
    _watch_everything(watched)
    moment = [at(1)]
    reconciler._clock = lambda: moment[0]
    names = [f"s{i:02d}" for i in range(40)]
    for name in names:
        body = sandbox_body(name=name, uid=_uid(name), spec={"maxAgeSeconds": 60})
        kube.objects[f"{SANDBOXES}/{name}/status"] = body
        sandbox = cache.upsert(body)
        assert sandbox is not None
        reconciler.reconcile(sandbox, "sandbox")
    reaper = _reaper(kube, reconciler, cache, election=Holder(), clock=lambda: moment[0])
    kube.take()
    moment[0] = at(61)
    assert reaper.reap_due() == len(names)
    assert _deleted(kube.take()) == set(names)
    assert 1 < kube.most_at_once <= REAP_AT_ONCE
