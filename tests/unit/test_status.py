"""The status builder publishes the limits the client enforces inside the sandbox."""

from __future__ import annotations

from datetime import UTC, datetime

from openblox.builders.conditions import Observation
from openblox.builders.status import build_status, profile_digest
from openblox.models.profile import ExecLimits
from tests.unit.factories import default_profile, make_sandbox

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def _status(**limits: object) -> dict[str, object]:
    return build_status(
        make_sandbox(),
        Observation(),
        pod_name=None,
        runtime_class_name=None,
        profile_digest=None,
        now=NOW,
        **limits,  # type: ignore[arg-type]
    )


def test_exec_limits_carry_the_process_cap_for_the_supervisor() -> None:
    status = _status(exec_limits=ExecLimits(timeout_seconds=5, output_bytes=4096), process_cap=64)
    assert status["execLimits"] == {"timeoutSeconds": 5, "outputBytes": 4096, "processes": 64}


def test_no_profile_means_no_exec_limits_at_all() -> None:
    assert "execLimits" not in _status(exec_limits=None, process_cap=None)


def test_the_profile_digest_is_the_running_pods_not_the_edited_profiles() -> None:
    profile = default_profile()
    built_from_an_older_profile = {
        "metadata": {"annotations": {"openblox.sh/profile-digest": "d1"}}
    }
    assert profile_digest(built_from_an_older_profile, profile) == "d1"
    # No pod yet, or one without the annotation: the profile's own digest.
    assert profile_digest(None, profile) == profile.digest
    assert profile_digest({"metadata": {"annotations": None}}, profile) == profile.digest
    assert profile_digest(None, None) is None
