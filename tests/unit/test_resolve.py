"""The first half of a reconcile: what a Sandbox should be, decided from what the watches
and the profile store hold, with nothing written and no request sent."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from openblox.controller.namespaces import Namespaces
from openblox.controller.profile_store import ProfileStore
from openblox.controller.resolve import (
    Expired,
    Refused,
    Resolution,
    RuntimeUnavailable,
    Wanted,
    resolve,
)
from openblox.controller.runtime_checks import RuntimeChecks
from openblox.controller.watched import Watched
from openblox.names import Reason
from tests.unit.factories import CREATED, DEFAULT_PROFILE_YAML, make_sandbox
from tests.unit.test_operator_loop import FakeKube, _watch_everything

SOON = CREATED + timedelta(seconds=1)


def _resolve(
    watched: Watched | None = None, *, at: object = SOON, **sandbox: object
) -> tuple[Resolution, FakeKube]:
    kube = FakeKube()
    if watched is None:
        watched = Watched()
        _watch_everything(watched)
    profiles = ProfileStore()
    profiles.update({"code-exec": DEFAULT_PROFILE_YAML})
    resolution = resolve(
        make_sandbox(**sandbox),
        at,  # type: ignore[arg-type]
        profiles=profiles,
        namespaces=Namespaces(kube, watched),  # type: ignore[arg-type]
        runtimes=RuntimeChecks(kube, watched, network_policy_enforced=False),  # type: ignore[arg-type]
    )
    return resolution, kube


def test_a_sandbox_whose_profile_and_runtime_are_there_wants_a_pod_and_asks_nothing() -> None:
    resolution, kube = _resolve()
    assert isinstance(resolution, Wanted)
    assert resolution.profile.name == "code-exec"
    assert not resolution.expiry.expired
    assert kube.calls == []


def test_a_profile_that_does_not_exist_is_refused_with_its_reason() -> None:
    resolution, _ = _resolve(profile="gpu")
    assert isinstance(resolution, Refused)
    assert resolution.profile is None
    assert resolution.observation().profile_problem is not None
    reason, message = resolution.event() or ("", "")
    assert reason == resolution.error.reason and "gpu" in message


def test_a_namespace_that_has_not_opted_in_is_refused() -> None:
    watched = Watched()
    watched.namespace_seen("team-a", {})
    watched.runtime_class_seen("gvisor")
    resolution, _ = _resolve(watched)
    assert isinstance(resolution, Refused)


def test_a_runtime_class_that_does_not_exist_makes_no_pod_and_says_why() -> None:
    watched = Watched()
    _watch_everything(watched)
    watched.runtime_class_gone("gvisor")
    resolution, _ = _resolve(watched)
    assert isinstance(resolution, RuntimeUnavailable)
    assert resolution.observation().runtime_available is False
    assert resolution.event() == (Reason.RUNTIME_UNAVAILABLE, resolution.message)
    assert 'RuntimeClass "gvisor" does not exist' in resolution.message


def test_a_sandbox_past_its_max_age_is_expired_with_its_denial_and_no_event() -> None:
    resolution, _ = _resolve(at=CREATED + timedelta(seconds=120), spec={"maxAgeSeconds": 60})
    assert isinstance(resolution, Expired)
    assert resolution.expiry.expired
    assert resolution.observation().denials == (resolution.denial,)
    assert resolution.event() is None  # the reaper records Expired as it deletes it


def test_a_resolution_is_a_value() -> None:
    resolution, _ = _resolve()
    with pytest.raises(dataclasses.FrozenInstanceError):
        resolution.expiry = None  # type: ignore[misc]
