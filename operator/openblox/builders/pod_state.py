"""What a sandbox pod says about itself: its container's state, a runtime the scheduler
found nowhere, a node that stopped answering, an image the kubelet could not get."""

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from openblox.names import CONTAINER_NAME
from openblox.timestamps import parse_timestamp


@dataclass(frozen=True, slots=True)
class PodState:
    """What the Sandbox's pod reports about itself."""

    phase: str = "Pending"
    ready: bool = False
    reason: str | None = None
    """The container's terminated or waiting reason (OOMKilled, ErrImageNeverPull), else
    the pod's own (Evicted, DeadlineExceeded) or its blocking condition's (Unschedulable)."""
    exit_code: int | None = None
    """Set once the sandbox container has terminated."""
    message: str = ""

    @property
    def terminated(self) -> bool:
        # restartPolicy is Never: a pod that ended, even with success, is a dead sandbox.
        return self.phase in ("Succeeded", "Failed") or self.exit_code is not None

    @classmethod
    def from_pod(cls, pod: Mapping[str, Any]) -> "PodState":
        status: Mapping[str, Any] = pod.get("status") or {}
        container: Mapping[str, Any] = next(
            (
                container_status
                for container_status in status.get("containerStatuses") or []
                if container_status.get("name") == CONTAINER_NAME
            ),
            {},
        )
        state = container.get("state") or {}
        terminated = state.get("terminated") or {}
        exit_code = terminated.get("exitCode")
        # The most specific explanation first: how the container ended, why it is
        # waiting, why the pod failed (Evicted), why it is stuck (Unschedulable).
        explanations = [terminated, state.get("waiting") or {}, status]
        explanations += [
            condition
            for condition in status.get("conditions") or []
            if condition.get("status") == "False"
        ]
        explanation = next((e for e in explanations if e.get("reason") or e.get("message")), {})
        return cls(
            phase=status.get("phase") or "Pending",
            ready=any(
                condition.get("type") == "Ready" and condition.get("status") == "True"
                for condition in status.get("conditions") or []
            ),
            reason=explanation.get("reason"),
            exit_code=exit_code if isinstance(exit_code, int) else None,
            message=explanation.get("message") or "",
        )


# The scheduler's words for nodes a pod's node selector rules out. The pod builder sets no
# selector of its own: the one there comes from the RuntimeClass's `scheduling` (only
# nodes labelled as having the runtime).
_SELECTOR_MISMATCH = "didn't match Pod's node affinity/selector"


def unschedulable_runtime(pod: Mapping[str, Any], runtime_class_name: str) -> str | None:
    """Why no node that has the pod's runtime can take it, or None.

    Set when the scheduler found the pod Unschedulable and ruled nodes out by the
    RuntimeClass's node selector: the nodes left (if any) could not take it either.
    The pod is kept, so it is placed as soon as a node with the runtime can take it.
    """
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"
            and _SELECTOR_MISMATCH in (condition.get("message") or "")
        ):
            selector = (pod.get("spec") or {}).get("nodeSelector") or {}
            labels = ", ".join(f"{key}={value}" for key, value in sorted(selector.items()))
            needs = f" (it needs a node labelled {labels})" if labels else ""
            return (
                f"no node with {runtime_class_name} can take the pod{needs}: {condition['message']}"
            )
    return None


# How long a pod the taint manager evicted may stay Terminating before its node counts as
# lost: its grace period (1 s) plus time for a kubelet that still answers to finish it.
LOST_NODE_GRACE_SECONDS = 15


def lost_node(pod: Mapping[str, Any], now: datetime) -> str | None:
    """The node a pod was evicted from and never finished on, or None.

    Kubernetes evicts a pod from a node that stopped answering (the pod's not-ready and
    unreachable tolerations ran out) by deleting it, but only that node's kubelet can
    finish the deletion, so the pod stays Terminating and its name stays taken. Past
    LOST_NODE_GRACE_SECONDS the pod's sandbox is either gone with its node or will be
    stopped by that kubelet when it is back (and by activeDeadlineSeconds in any case).
    """
    metadata = pod.get("metadata") or {}
    deleted = metadata.get("deletionTimestamp")
    if not deleted:
        return None
    evicted = any(
        condition.get("type") == "DisruptionTarget"
        and condition.get("status") == "True"
        and condition.get("reason") == "DeletionByTaintManager"
        for condition in (pod.get("status") or {}).get("conditions") or []
    )
    if not evicted:
        return None
    since = (now - parse_timestamp(deleted)).total_seconds()
    if since < LOST_NODE_GRACE_SECONDS:
        return None
    return str((pod.get("spec") or {}).get("nodeName") or "its node")


def _condition_of(pod: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == kind), {})


def node_trouble(pod: Mapping[str, Any]) -> str | None:
    """Why the pod is unusable because of its node, or None: the node stopped answering.

    Two moments a caller would otherwise see only as a pod still `Running`: the node
    lifecycle controller marked the pod not Ready (its node's kubelet stopped reporting;
    the container itself still counts as ready, and sandbox pods have no readiness
    probe, so nothing else turns Ready off while ContainersReady stays on), and then,
    once the pod's toleration ran out, the taint manager evicted it.
    """
    node = str((pod.get("spec") or {}).get("nodeName") or "its node")
    evicted = _condition_of(pod, "DisruptionTarget")
    if (
        (pod.get("metadata") or {}).get("deletionTimestamp")
        and evicted.get("status") == "True"
        and evicted.get("reason") == "DeletionByTaintManager"
    ):
        return (
            f"node {node} stopped answering and Kubernetes evicted the pod "
            f"({evicted.get('message') or 'NoExecute taint'}); the Sandbox gets a new pod "
            f"on another node with its runtime {LOST_NODE_GRACE_SECONDS}s after the eviction "
            "if that node does not finish the old one, or says why it cannot"
        )
    ready, containers = _condition_of(pod, "Ready"), _condition_of(pod, "ContainersReady")
    if (
        (pod.get("status") or {}).get("phase") == "Running"
        and ready.get("status") == "False"
        and containers.get("status") == "True"
    ):
        return (
            f"node {node} stopped answering: Kubernetes marked the pod not ready at "
            f"{ready.get('lastTransitionTime') or 'an unknown time'}; it is evicted when its "
            "toleration of the node's taint runs out, and the Sandbox then gets a new pod"
        )
    return None


# The kubelet's waiting reasons for a container whose image it could not get.
IMAGE_PULL_FAILURES = frozenset(
    {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}
)


def image_not_pulled(pod: PodState) -> str | None:
    """Why the kubelet could not get the sandbox image, or None if it has it. Its message
    names the image and the registry's answer (not found, connection refused): the admin's
    next step, so it is passed on whole."""
    if pod.reason not in IMAGE_PULL_FAILURES:
        return None
    return f"the sandbox image could not be pulled ({pod.reason}): {pod.message}"
