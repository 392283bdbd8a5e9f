"""A replica that does not hold the operator's Lease: the pool keeper sends nothing, the
profile watcher publishes nothing, a refused pool's Event waits for the holder, and a
takeover writes what the standby could not (and nothing before the ConfigMaps are read)."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from openblox.controller.election import NotLeader
from openblox.controller.events import EventRecorder
from openblox.controller.kube import ApiError
from openblox.controller.pool_keeper import PoolKeeper
from openblox.controller.pool_store import PoolStore
from openblox.controller.profile_store import ProfileStore
from openblox.controller.profile_watch import ProfileWatcher
from openblox.controller.unprepared_nodes import UnpreparedNodes

BROKEN = {
    "metadata": {"name": "openblox-pools", "namespace": "openblox-system", "uid": "cm-uid"},
    "data": {"warm": "profile: code-exec\nnamespaces: [team-a]\nsize: -1\n"},
}


ADMISSION = "/api/v1/namespaces/openblox-system/configmaps/openblox-profile-admission"
PROFILES = {"metadata": {"name": "openblox-profiles", "namespace": "openblox-system"}, "data": {}}


class FencedKube:
    """Records every request; a write passes the fence first, as `Kube.guarded` does."""

    def __init__(self) -> None:
        self.leading = False
        self.calls: list[tuple[str, str]] = []

    def _fence(self) -> None:
        if not self.leading:
            raise NotLeader("standby")

    def get(self, target: str, **_: Any) -> dict[str, Any]:
        self.calls.append(("GET", target))
        if target == ADMISSION:
            raise ApiError(404, "NotFound")
        return {"items": []}

    def put(self, target: str, body: Any) -> dict[str, Any]:
        self._fence()
        self.calls.append(("PUT", target))
        return dict(body)

    def post(self, target: str, body: Any) -> dict[str, Any]:
        self._fence()
        self.calls.append(("POST", target))
        return dict(body)

    def patch(self, target: str, body: Any, content_type: str = "") -> dict[str, Any]:
        self._fence()
        self.calls.append(("PATCH", target))
        return dict(body)

    def delete(self, target: str, body: Any = None) -> dict[str, Any]:
        self._fence()
        self.calls.append(("DELETE", target))
        return {}


def _run_briefly(keeper: PoolKeeper, seconds: float = 0.1) -> None:
    stop = threading.Event()
    thread = threading.Thread(target=keeper.run, args=(stop,), daemon=True)
    thread.start()
    stop.wait(seconds)
    stop.set()
    keeper.nudge()
    thread.join(timeout=2)
    assert not thread.is_alive()


def test_the_keeper_of_a_standby_sends_no_request_at_all() -> None:
    kube = FencedKube()
    untouched: Any = object()  # any use of these would raise AttributeError
    keeper = PoolKeeper(
        kube,  # type: ignore[arg-type]
        untouched,
        untouched,
        untouched,
        namespaces=untouched,
        runtimes=untouched,
        boundaries=untouched,
        unprepared=UnpreparedNodes(),
        held=lambda: False,
        interval_seconds=0.01,
    )
    keeper.nudge()
    _run_briefly(keeper)
    assert kube.calls == []


def test_a_pass_that_loses_the_lease_midway_stands_by_quietly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    untouched: Any = object()
    keeper = PoolKeeper(
        FencedKube(),  # type: ignore[arg-type]
        untouched,
        untouched,
        untouched,
        namespaces=untouched,
        runtimes=untouched,
        boundaries=untouched,
        unprepared=UnpreparedNodes(),
        held=lambda: True,
        interval_seconds=0.01,
    )
    passes: list[None] = []

    def refused() -> None:
        passes.append(None)
        raise NotLeader("lost it")

    keeper.run_once = refused  # type: ignore[method-assign]
    with caplog.at_level(logging.INFO, logger="openblox.controller.pool_keeper"):
        _run_briefly(keeper)
    assert passes
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_refused_pool_s_event_is_written_by_the_replica_that_takes_over() -> None:
    kube = FencedKube()
    store = PoolStore(kube, EventRecorder(kube, "replica-b"))  # type: ignore[arg-type]
    store.apply(BROKEN)
    assert kube.calls == []  # a standby: the fence refused the Event, nothing was sent
    store.take_over()
    assert kube.calls == []  # still a standby
    kube.leading = True
    store.take_over()
    assert kube.calls == [("POST", "/api/v1/namespaces/openblox-system/events")]
    store.take_over()  # written once: the recorder remembers it now
    assert len(kube.calls) == 1


def test_a_take_over_before_the_pools_were_read_does_nothing() -> None:
    kube = FencedKube()
    kube.leading = True
    changes: list[None] = []
    store = PoolStore(kube, EventRecorder(kube, "r"), on_change=lambda: changes.append(None))  # type: ignore[arg-type]
    store.take_over()
    assert not store.loaded()  # an unread ConfigMap must not look like "no pools"
    assert kube.calls == [] and changes == []


def _watcher(kube: FencedKube) -> ProfileWatcher:
    return ProfileWatcher(
        kube,  # type: ignore[arg-type]
        ProfileStore(),
        EventRecorder(kube, "r"),  # type: ignore[arg-type]
        on_change=lambda: None,
        leading=lambda: kube.leading,
    )


def test_a_standby_publishes_no_admission_parameters_and_the_new_holder_does() -> None:
    kube = FencedKube()
    watcher = _watcher(kube)
    watcher.apply(PROFILES)
    assert kube.calls == []
    kube.leading = True
    watcher.take_over()
    assert ("POST", ADMISSION.rpartition("/")[0]) in kube.calls


def test_a_take_over_before_the_profiles_were_read_publishes_nothing() -> None:
    kube = FencedKube()
    kube.leading = True
    watcher = _watcher(kube)
    watcher.take_over()  # "no ConfigMap" would publish parameters with no profiles
    assert kube.calls == []
