"""What the conformance suite says about a pod that did not start: the kubelet's reason,
each container's exit code (the log tail and Events come from the API server, and are
checked on the cluster in tests/cluster/test_canaries.py)."""

from __future__ import annotations

from typing import Any

from openblox.conformance.cluster_api import PodEnded, _pod_summary, describe_events, message_of
from openblox.transport import ApiError, NotFound
from openblox.transport.errors import api_error

REJECTED = {
    "status": {
        "phase": "Failed",
        "reason": "OutOfcpu",
        "message": "Pod was rejected: Node didn't have enough resource: cpu, requested: 10, "
        "used: 1995, capacity: 2000",
    }
}
EXITED = {
    "status": {
        "phase": "Failed",
        "containerStatuses": [
            {
                "name": "canary",
                "state": {"terminated": {"reason": "Error", "exitCode": 3}},
            }
        ],
    }
}


def test_a_pod_the_kubelet_refused_says_why() -> None:
    summary = _pod_summary(REJECTED)
    assert summary.startswith("Failed; OutOfcpu: Pod was rejected: Node didn't have enough")
    assert PodEnded(summary, REJECTED).rejected_at_admission


def test_a_container_that_exited_gives_its_exit_code() -> None:
    assert _pod_summary(EXITED) == "Failed; canary terminated Error exit code 3"
    assert not PodEnded("x", EXITED).rejected_at_admission


def test_events_are_told_oldest_first_whichever_time_field_they_carry() -> None:
    events: list[dict[str, Any]] = [
        {
            "type": "Normal",
            "reason": "Started",
            "message": "started",
            "eventTime": "2026-01-01T00:00:03.000001Z",
        },
        {
            "type": "Warning",
            "reason": "BackOff",
            "message": " backing off ",
            "count": 4,
            "lastTimestamp": "2026-01-01T00:00:05Z",
        },
        {
            "type": "Normal",
            "reason": "Scheduled",
            "message": "assigned",
            "metadata": {"creationTimestamp": "2026-01-01T00:00:01Z"},
        },
        {"type": "Normal", "reason": "Undated"},
    ]
    assert describe_events(events) == (
        "events: Normal Undated:  | Normal Scheduled: assigned | Normal Started: started"
        " | Warning BackOff x4: backing off"
    )
    assert describe_events(events, most=1) == "events: Warning BackOff x4: backing off"
    assert describe_events([]) == "no events"


def test_a_refusal_is_told_by_its_status_and_the_api_servers_message() -> None:
    refused = api_error(
        403, "Forbidden", b'{"kind":"Status","message":"nope","reason":"Forbidden"}'
    )
    assert message_of(refused) == "403: nope"
    assert message_of(ApiError(500, "Internal Server Error", "not json")) == (
        "500: Internal Server Error"
    )
    assert message_of(NotFound(404, "Not Found")) == "404: Not Found"
    assert message_of(TimeoutError("slow")) == "TimeoutError: slow"
