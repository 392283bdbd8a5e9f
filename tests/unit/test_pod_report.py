"""What the conformance suite says about a pod that did not start: the kubelet's reason,
each container's exit code (the log tail and Events come from the API server, and are
checked on the cluster in tests/cluster/test_canaries.py)."""

from __future__ import annotations

from openblox.conformance.kube import PodEnded, _pod_summary

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
