from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, ClassVar

import pytest

from openblox.builders import (
    Condition,
    Observation,
    PodState,
    Problem,
    compute_conditions,
    status_changed,
)
from openblox.builders.pod_state import (
    LOST_NODE_GRACE_SECONDS,
    lost_node,
    node_trouble,
    unschedulable_runtime,
)
from openblox.lifetime import Expiry
from openblox.models import ProfileNotFound
from openblox.names import Reason
from tests.unit.factories import CREATED

NOW = CREATED + timedelta(minutes=5)
LATER = NOW + timedelta(minutes=1)
RUNNING = PodState(phase="Running", ready=True)
HEALTHY = Observation(
    runtime_available=True,
    pod=RUNNING,
    expected_boundary="gvisor",
    observed_boundary="gvisor",
    expiry=Expiry(NOW + timedelta(minutes=10), "Idle", expired=False),
)
NOT_FOUND = Problem.from_error(ProfileNotFound("nope", ["code-exec"]))


def by_type(conditions: Sequence[Condition]) -> dict[str, Condition]:
    return {condition["type"]: condition for condition in conditions}


def summary(observation: Observation) -> tuple[str, str]:
    ready = by_type(compute_conditions(observation, 1, [], NOW))["Ready"]
    return ready["status"], ready["reason"]


def test_a_healthy_sandbox_is_ready() -> None:
    conditions = compute_conditions(HEALTHY, 3, [], NOW)

    assert [c["type"] for c in conditions] == [
        "Ready",
        "ProfileResolved",
        "RuntimeAvailable",
        "PodReady",
    ]
    assert by_type(conditions)["Ready"] == {
        "type": "Ready",
        "status": "True",
        "reason": "Ready",
        "message": "the sandbox is ready to run commands",
        "observedGeneration": 3,
        "lastTransitionTime": "2025-01-02T03:09:05Z",
    }
    assert all(c["status"] == "True" for c in conditions)
    assert by_type(conditions)["RuntimeAvailable"]["message"].endswith("runs behind gvisor")


@pytest.mark.parametrize(
    ("observation", "expected"),
    [
        pytest.param(
            Observation(profile_problem=NOT_FOUND),
            ("False", "ProfileNotFound"),
            id="profile-not-found",
        ),
        pytest.param(
            Observation(runtime_available=False, runtime_message="RuntimeClass kata not found"),
            ("False", "RuntimeUnavailable"),
            id="runtime-unavailable",
        ),
        pytest.param(
            Observation(runtime_available=True),
            ("False", "PodPending"),
            id="no-pod-yet",
        ),
        pytest.param(
            Observation(
                runtime_available=True, pod=PodState("Pending", reason="ErrImageNeverPull")
            ),
            ("False", "ImageNotPulled"),
            id="image-not-on-the-node",
        ),
        pytest.param(
            Observation(runtime_available=True, pod=PodState("Failed")),
            ("False", "PodFailed"),
            id="pod-failed",
        ),
        pytest.param(
            Observation(runtime_available=True, pod=RUNNING, pod_conflict="taken"),
            ("False", "PodConflict"),
            id="pod-name-taken",
        ),
        pytest.param(
            Observation(
                runtime_available=True,
                pod_refused="the API server refused the pod: exceeded quota: q, requested: pods=1",
            ),
            ("False", "PodNotCreated"),
            id="pod-refused",
        ),
        pytest.param(
            Observation(pod=RUNNING),
            ("Unknown", "RuntimeNotChecked"),
            id="runtime-not-checked",
        ),
        pytest.param(
            Observation(runtime_available=True, pod=RUNNING, expiry=Expiry(NOW, "MaxAge", True)),
            ("False", "Expired"),
            id="expired-outranks-a-healthy-pod",
        ),
        pytest.param(
            Observation(
                runtime_available=True,
                pod=RUNNING,
                expected_boundary="gvisor",
                observed_boundary="none",
                expiry=Expiry(NOW, "MaxAge", expired=True),
            ),
            ("False", "BoundaryMismatch"),
            id="boundary-mismatch-outranks-expiry",
        ),
    ],
)
def test_ready_summarises_the_most_important_problem(
    observation: Observation, expected: tuple[str, str]
) -> None:
    assert summary(observation) == expected


def test_a_profile_problem_explains_itself_and_blocks_the_rest() -> None:
    conditions = by_type(compute_conditions(Observation(profile_problem=NOT_FOUND), 1, [], NOW))

    assert conditions["ProfileResolved"]["status"] == "False"
    assert conditions["ProfileResolved"]["message"] == NOT_FOUND.message
    assert conditions["RuntimeAvailable"]["status"] == "Unknown"
    assert conditions["RuntimeAvailable"]["reason"] == "ProfileNotResolved"
    assert conditions["PodReady"]["reason"] == "PodNotCreated"
    assert conditions["Ready"]["message"] == (
        'profile "nope" does not exist (profiles available here: code-exec)'
    )


def test_boundary_mismatch_names_both_boundaries() -> None:
    observation = Observation(
        runtime_available=True, pod=RUNNING, expected_boundary="kata", observed_boundary="gvisor"
    )
    runtime = by_type(compute_conditions(observation, 1, [], NOW))["RuntimeAvailable"]

    assert runtime["status"] == "False"
    assert (
        runtime["message"] == "the profile claims the kata boundary but the pod runs behind gvisor"
    )


def test_an_unsafe_profile_makes_no_boundary_claim_to_mismatch() -> None:
    observation = Observation(
        runtime_available=True, pod=RUNNING, expected_boundary=None, observed_boundary="none"
    )
    assert summary(observation) == ("True", "Ready")


def test_expiry_says_which_limit_and_when() -> None:
    expiry = Expiry(CREATED + timedelta(hours=1), "MaxAge", expired=True)
    ready = by_type(compute_conditions(Observation(expiry=expiry), 1, [], NOW))["Ready"]

    assert ready["message"] == (
        "the sandbox reached its max age at 2025-01-02T04:04:05Z and will be deleted"
    )


@pytest.mark.parametrize(
    ("pod", "message"),
    [
        (PodState("Pending"), "the pod is Pending"),
        (
            PodState("Pending", reason="ContainerCreating"),
            "the pod is Pending: ContainerCreating",
        ),
        (
            PodState(
                "Pending",
                reason="ImagePullBackOff",
                message='Back-off pulling image "r/x@sha256:1": not found',
            ),
            "the sandbox image could not be pulled (ImagePullBackOff): "
            'Back-off pulling image "r/x@sha256:1": not found',
        ),
    ],
)
def test_a_pending_pod_says_what_it_waits_for(pod: PodState, message: str) -> None:
    """An image the kubelet cannot get is named with the registry's answer."""
    pod_ready = by_type(compute_conditions(Observation(pod=pod), 1, [], NOW))["PodReady"]
    assert pod_ready["message"] == message


def test_a_failed_pod_says_how_it_ended() -> None:
    pod = PodState("Failed", reason="OOMKilled", exit_code=137)
    pod_ready = by_type(compute_conditions(Observation(pod=pod), 1, [], NOW))["PodReady"]

    assert pod_ready["message"] == (
        "the sandbox has ended and cannot be used again: OOMKilled (exit code 137); "
        "files in /tmp and /workspace count against the memory limit"
    )


class TestLastTransitionTime:
    def test_is_kept_while_the_status_holds_even_if_reason_or_generation_change(self) -> None:
        first = compute_conditions(Observation(profile_problem=NOT_FOUND), 1, [], NOW)
        other_problem = Problem(Reason.PROFILE_NOT_ALLOWED, "not here")
        second = compute_conditions(Observation(profile_problem=other_problem), 2, first, LATER)

        assert {c["lastTransitionTime"] for c in second} == {"2025-01-02T03:09:05Z"}
        assert {c["observedGeneration"] for c in second} == {2}
        assert by_type(second)["Ready"]["reason"] == "ProfileNotAllowed"

    def test_moves_only_for_conditions_whose_status_changed(self) -> None:
        pending = Observation(runtime_available=True, pod=PodState("Pending"))
        first = compute_conditions(pending, 1, [], NOW)
        second = by_type(compute_conditions(HEALTHY, 1, first, LATER))

        assert second["ProfileResolved"]["lastTransitionTime"] == "2025-01-02T03:09:05Z"
        assert second["RuntimeAvailable"]["lastTransitionTime"] == "2025-01-02T03:09:05Z"
        assert second["PodReady"]["lastTransitionTime"] == "2025-01-02T03:10:05Z"
        assert second["Ready"]["lastTransitionTime"] == "2025-01-02T03:10:05Z"

    def test_an_unchanged_world_gives_an_unchanged_status(self) -> None:
        first = compute_conditions(HEALTHY, 1, [], NOW)
        second = compute_conditions(HEALTHY, 1, list(reversed(first)), LATER)

        assert second == first
        assert not status_changed({"conditions": first}, {"conditions": second})


class TestPodStateFromPod:
    def test_a_running_ready_pod(self) -> None:
        pod = {
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{"name": "sandbox", "ready": True, "state": {"running": {}}}],
            }
        }
        assert PodState.from_pod(pod) == PodState(phase="Running", ready=True)

    def test_a_container_killed_for_memory(self) -> None:
        pod = {
            "status": {
                "phase": "Failed",
                "conditions": [{"type": "Ready", "status": "False", "reason": "PodFailed"}],
                "containerStatuses": [
                    {
                        "name": "sandbox",
                        "state": {"terminated": {"reason": "OOMKilled", "exitCode": 137}},
                    }
                ],
            }
        }
        state = PodState.from_pod(pod)
        assert state == PodState(phase="Failed", reason="OOMKilled", exit_code=137)
        assert state.terminated

    def test_an_image_that_was_never_imported(self) -> None:
        waiting = {"reason": "ErrImageNeverPull", "message": 'Container image "x" is not present'}
        pod = {
            "status": {
                "phase": "Pending",
                "containerStatuses": [{"name": "sandbox", "state": {"waiting": waiting}}],
            }
        }
        state = PodState.from_pod(pod)
        assert state == PodState("Pending", reason="ErrImageNeverPull", message=waiting["message"])
        assert not state.terminated

    def test_an_evicted_pod_reports_the_pods_own_reason(self) -> None:
        pod = {"status": {"phase": "Failed", "reason": "Evicted", "message": "ephemeral storage"}}
        assert PodState.from_pod(pod) == PodState(
            "Failed", reason="Evicted", message="ephemeral storage"
        )

    def test_an_unschedulable_pod_says_why(self) -> None:
        unschedulable = {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": "0/1 nodes are available",
        }
        pod = {"status": {"phase": "Pending", "conditions": [unschedulable]}}
        state = PodState.from_pod(pod)
        assert (state.reason, state.message) == ("Unschedulable", "0/1 nodes are available")

    def test_a_pod_without_status_is_pending(self) -> None:
        assert PodState.from_pod({"metadata": {"name": "demo"}}) == PodState()

    def test_a_succeeded_pod_is_a_dead_sandbox(self) -> None:
        assert PodState("Succeeded").terminated


class TestStatusChanged:
    status: ClassVar[dict[str, Any]] = {
        "observedGeneration": 1,
        "podName": "demo",
        "conditions": [{"type": "Ready", "status": "True"}, {"type": "PodReady", "status": "True"}],
    }

    def test_condition_order_does_not_matter(self) -> None:
        reordered = {**self.status, "conditions": list(reversed(self.status["conditions"]))}
        assert not status_changed(self.status, reordered)

    @pytest.mark.parametrize(
        "change",
        [
            {"observedGeneration": 2},
            {"podName": "other"},
            {"boundary": "gvisor"},
            {
                "conditions": [
                    {"type": "Ready", "status": "False"},
                    {"type": "PodReady", "status": "True"},
                ]
            },
        ],
    )
    def test_anything_else_does(self, change: dict[str, Any]) -> None:
        assert status_changed(self.status, {**self.status, **change})

    def test_a_missing_field_is_a_change(self) -> None:
        trimmed = {key: value for key, value in self.status.items() if key != "podName"}
        assert status_changed(self.status, trimmed)

    def test_no_previous_status_is_a_change(self) -> None:
        assert status_changed(None, self.status)
        assert not status_changed(None, {})


def test_a_running_pod_is_not_ready_until_its_boundary_is_seen() -> None:
    """Fail closed: callers wait until the kernel inside the pod has been checked."""
    unconfirmed = replace(HEALTHY, observed_boundary=None)
    assert summary(unconfirmed) == ("Unknown", Reason.RUNTIME_NOT_CHECKED)
    message = by_type(compute_conditions(unconfirmed, 1, [], NOW))["RuntimeAvailable"]["message"]
    assert "gvisor boundary inside it is not confirmed yet" in message


def _pending_pod(reason: str, message: str) -> dict[str, Any]:
    return {
        "spec": {"runtimeClassName": "gvisor"},
        "status": {
            "phase": "Pending",
            "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": reason, "message": message}
            ],
        },
    }


def test_a_pod_no_gvisor_node_can_take_is_a_runtime_problem() -> None:
    message = (
        "0/3 nodes are available: 1 node(s) had untolerated taint "
        "{node.kubernetes.io/unreachable: }, 2 node(s) didn't match Pod's node "
        "affinity/selector. preemption: 0/3 nodes are available."
    )

    problem = unschedulable_runtime(_pending_pod("Unschedulable", message), "gvisor")

    assert problem == f"no node with gvisor can take the pod: {message}"
    # The RuntimeClass's selector, which admission copied into the pod, is named: the
    # node agent sets that label on nodes it found prepared (ADR 0020).
    pod = _pending_pod("Unschedulable", message)
    pod["spec"]["nodeSelector"] = {"openblox.sh/gvisor-ready": "true"}
    assert unschedulable_runtime(pod, "gvisor") == (
        "no node with gvisor can take the pod (it needs a node labelled "
        f"openblox.sh/gvisor-ready=true): {message}"
    )


@pytest.mark.parametrize(
    ("reason", "message"),
    [
        # Full nodes that all have the runtime: the pod waits for room, as any pod does.
        ("Unschedulable", "0/2 nodes are available: 2 Insufficient memory."),
        # Not yet looked at by the scheduler.
        ("SchedulingGated", "Scheduling is blocked due to non-empty scheduling gates"),
    ],
)
def test_other_scheduling_waits_are_not_runtime_problems(reason: str, message: str) -> None:
    assert unschedulable_runtime(_pending_pod(reason, message), "gvisor") is None


def test_a_scheduled_pod_has_no_runtime_scheduling_problem() -> None:
    pod = {
        "status": {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"}]}
    }

    assert unschedulable_runtime(pod, "gvisor") is None


def _evicted_pod(deleted: datetime, reason: str = "DeletionByTaintManager") -> dict[str, Any]:
    return {
        "metadata": {"deletionTimestamp": deleted.strftime("%Y-%m-%dT%H:%M:%SZ")},
        "spec": {"nodeName": "worker"},
        "status": {
            "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": reason}]
        },
    }


def test_a_pod_evicted_from_a_lost_node_is_released_after_the_grace() -> None:
    deleted = NOW - timedelta(seconds=LOST_NODE_GRACE_SECONDS + 1)

    assert lost_node(_evicted_pod(deleted), NOW) == "worker"


def test_a_pod_still_within_its_grace_is_left_to_its_kubelet() -> None:
    deleted = NOW - timedelta(seconds=LOST_NODE_GRACE_SECONDS - 5)

    assert lost_node(_evicted_pod(deleted), NOW) is None


def test_a_pod_deleted_for_another_reason_is_not_a_lost_node() -> None:
    deleted = NOW - timedelta(minutes=5)

    assert lost_node(_evicted_pod(deleted, reason="PreemptionByScheduler"), NOW) is None
    assert lost_node({"metadata": {}, "status": {}}, NOW) is None


def _running_pod(conditions: list[dict[str, str]], **metadata: str) -> dict[str, Any]:
    return {
        "metadata": metadata,
        "spec": {"nodeName": "worker"},
        "status": {"phase": "Running", "conditions": conditions},
    }


def test_a_pod_its_node_stopped_reporting_says_so() -> None:
    # What the node lifecycle controller leaves: Ready off, the container still ready.
    pod = _running_pod(
        [
            {"type": "Ready", "status": "False", "lastTransitionTime": "2025-01-02T03:04:05Z"},
            {"type": "ContainersReady", "status": "True"},
        ]
    )

    message = node_trouble(pod)

    assert message is not None and "node worker stopped answering" in message
    assert "2025-01-02T03:04:05Z" in message
    conditions = by_type(
        compute_conditions(
            replace(HEALTHY, pod=PodState.from_pod(pod), node_problem=message), 1, [], NOW
        )
    )
    assert conditions["Ready"]["status"] == "False"
    assert conditions["Ready"]["reason"] == "NodeLost"
    assert conditions["PodReady"]["message"] == message


def test_a_pod_the_taint_manager_evicted_says_its_node_was_lost() -> None:
    pod = _evicted_pod(NOW - timedelta(seconds=3))

    message = node_trouble(pod)

    assert message is not None and "node worker stopped answering" in message
    assert "evicted" in message


def test_a_healthy_pod_or_an_ordinary_deletion_is_no_node_trouble() -> None:
    ready = [{"type": "Ready", "status": "True"}, {"type": "ContainersReady", "status": "True"}]
    # A container that is not ready (it ended, it is starting) is the pod's own business.
    not_ready = [
        {"type": "Ready", "status": "False"},
        {"type": "ContainersReady", "status": "False"},
    ]

    assert node_trouble(_running_pod(ready)) is None
    assert node_trouble(_running_pod(not_ready)) is None
    assert node_trouble(_running_pod(ready, deletionTimestamp="2025-01-02T03:04:05Z")) is None
    assert node_trouble(_evicted_pod(NOW, reason="PreemptionByScheduler")) is None
