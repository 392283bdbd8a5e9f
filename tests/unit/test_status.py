"""The status builder publishes the limits the client enforces inside the sandbox."""

from __future__ import annotations

from datetime import UTC, datetime

from openblox.builders.conditions import Observation
from openblox.builders.status import build_status
from openblox.models.profile import ExecLimits
from tests.unit.factories import make_sandbox

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
