"""Why an exec broke, from what the API server showed of the pod and the Sandbox."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from openblox.client.limits import DEFAULT_PROCESS_CAP, ExecLimits
from openblox.client.postmortem import (
    Fate,
    created_after,
    gone_message,
    latest_denial,
    no_verdict_message,
    pod_fate,
    pod_sizes,
    status_denial,
)
from openblox.denials import Denial

SINCE = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
NOW = SINCE + timedelta(seconds=5)


def _pod(*, created: datetime = SINCE - timedelta(minutes=5), **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "creationTimestamp": created.strftime("%Y-%m-%dT%H:%M:%SZ")},
        "spec": {
            "containers": [{"name": "sandbox", "resources": {"limits": {"memory": "512Mi"}}}],
            "volumes": [{"name": "workspace", "emptyDir": {"sizeLimit": "1Gi"}}],
        },
        "status": {"phase": "Running", **status},
    }


def test_a_pod_still_running_means_the_stream_itself_broke() -> None:
    assert pod_fate(_pod(), since=SINCE, profile="p", now=NOW).fate is Fate.RUNNING


def test_an_absent_pod_a_newer_pod_or_one_being_deleted_was_replaced() -> None:
    assert pod_fate(None, since=SINCE, profile="p", now=NOW).fate is Fate.REPLACED
    newer = _pod(created=SINCE + timedelta(seconds=1))
    assert pod_fate(newer, since=SINCE, profile="p", now=NOW).fate is Fate.REPLACED
    deleting = _pod()
    deleting["metadata"]["deletionTimestamp"] = "2026-12-01T12:00:03Z"
    assert pod_fate(deleting, since=SINCE, profile="p", now=NOW).fate is Fate.REPLACED


def test_an_oom_killed_container_is_a_memory_denial() -> None:
    terminated = {
        "reason": "OOMKilled",
        "exitCode": 137,
        "finishedAt": "2026-12-01T12:00:02Z",
    }
    pod = _pod(
        phase="Failed",
        containerStatuses=[{"name": "sandbox", "state": {"terminated": terminated}}],
    )
    fate = pod_fate(pod, since=SINCE, profile="code-exec", now=NOW)
    assert fate.fate is Fate.ENDED
    assert isinstance(fate.denial, Denial)
    assert fate.denial.denied == "memory"
    assert fate.denial.profile == "code-exec"


def test_a_pod_that_ended_for_no_policy_carries_no_denial() -> None:
    terminated = {"reason": "Completed", "exitCode": 0, "finishedAt": "2026-12-01T12:00:02Z"}
    pod = _pod(
        phase="Succeeded",
        containerStatuses=[{"name": "sandbox", "state": {"terminated": terminated}}],
    )
    fate = pod_fate(pod, since=SINCE, profile="p", now=NOW)
    assert fate.fate is Fate.ENDED and fate.denial is None


def test_a_pod_without_a_creation_time_is_not_taken_for_a_replacement() -> None:
    pod = _pod()
    del pod["metadata"]["creationTimestamp"]
    assert not created_after(pod, SINCE)


def _denial(at: datetime, evidence: str = "kubelet: OOMKilled") -> Denial:
    return Denial("memory", "use more memory", "memory=512Mi", "code-exec", at, evidence, False)


def at(offset: float) -> dict[str, Any]:
    """The wire record the status holds, of a denial `offset` seconds after SINCE."""
    return _denial(SINCE + timedelta(seconds=offset)).to_dict()


def test_only_a_status_denial_from_about_the_exec_on_counts() -> None:
    assert status_denial({"status": {"denials": [at(-60)]}}, SINCE) is None
    found = status_denial({"status": {"denials": [at(-60), at(-1)]}}, SINCE)
    assert isinstance(found, Denial)
    assert found == Denial.from_dict(at(-1))
    assert status_denial(None, SINCE) is None


def test_a_status_record_that_does_not_parse_is_skipped_with_a_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    garbage = {"denied": "x", "at": "garbage"}
    with caplog.at_level(logging.WARNING, logger="openblox.client.postmortem"):
        assert status_denial({"status": {"denials": [garbage]}}, SINCE) is None
        assert status_denial({"status": {"denials": [garbage, at(1)]}}, SINCE) == (
            Denial.from_dict(at(1))
        )
    assert "the Sandbox's status" in caplog.text and "does not parse" in caplog.text


def test_the_latest_recorded_denial_wins() -> None:
    records = [_denial(SINCE, "first"), _denial(SINCE + timedelta(hours=1), "second")]
    assert latest_denial(records) is records[1]
    assert latest_denial(list(reversed(records))) is records[1]
    assert latest_denial([]) is None


def test_messages_say_what_was_lost_and_what_the_exec_said() -> None:
    said = gone_message("ns", "box", _denial(SINCE))
    assert "denied memory (memory=512Mi)" in said and "files in /tmp and /workspace" in said
    assert gone_message("ns", "box", None) == "sandbox ns/box went away during the exec"
    status = b'{"status":"Failure","details":{"causes":[{"reason":"ExitCode","message":"2"}]}}'
    message = no_verdict_message(status, bytearray(b"x" * 600 + b"the end"))
    assert "(exit 2)" in message and message.endswith("the end")
    assert "(exit None)" in no_verdict_message(b"", b"")
    # The container runtime could not start the command: its reason is in the Status.
    refused = (
        b'{"status":"Failure","message":"Internal error occurred: error executing command in '
        b"container: failed to exec in container: failed to load task: context deadline "
        b'exceeded","reason":"InternalError","code":500}'
    )
    assert "failed to load task: context deadline exceeded" in no_verdict_message(refused, b"")


def test_the_pods_sizes_name_the_limits() -> None:
    assert pod_sizes(_pod()) == ("512Mi", "1Gi")
    assert pod_sizes({}) == (None, None)


def test_exec_limits_come_from_the_status_with_defaults() -> None:
    published = {"execLimits": {"timeoutSeconds": 30, "outputBytes": 4096, "processes": 64}}
    assert ExecLimits.from_status(published) == ExecLimits(30.0, 4096, 64)
    assert ExecLimits.from_status({}).processes == DEFAULT_PROCESS_CAP
    assert ExecLimits.from_status({"execLimits": {"processes": 0}}).processes == DEFAULT_PROCESS_CAP
