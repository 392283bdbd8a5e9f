"""A Sandbox's status conditions (KEP-1623 shape), computed from what the operator observed.

The computation is level-based and deterministic: the same observation gives the same
conditions, and a condition keeps its lastTransitionTime until its status changes, so
an unchanged world produces an unchanged status and no patch.
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, TypedDict

from openblox.builders.pod_state import PodState, image_not_pulled
from openblox.denials import Denial
from openblox.lifetime import Expiry
from openblox.models import Boundary, OpenbloxError
from openblox.models.sandbox import plain
from openblox.names import ConditionType, Reason
from openblox.timestamps import format_timestamp

ConditionStatus = Literal["True", "False", "Unknown"]

# The CRD's limit, which is metav1.Condition's.
_MAX_MESSAGE = 32768


class Condition(TypedDict):
    type: str
    status: ConditionStatus
    reason: str
    message: str
    observedGeneration: int
    lastTransitionTime: str


@dataclass(frozen=True, slots=True)
class Problem:
    """Why something the Sandbox depends on is unusable, as a condition reason and message."""

    reason: Reason
    message: str

    @classmethod
    def from_error(cls, error: OpenbloxError) -> "Problem":
        return cls(error.reason, error.message)


@dataclass(frozen=True, slots=True)
class Observation:
    """Everything the operator saw in one reconcile; None means not (yet) observed."""

    profile_problem: Problem | None = None
    """Set when the Sandbox's profile is missing, not allowed, broken or outlived."""
    runtime_available: bool | None = None
    runtime_message: str = ""
    pod: PodState | None = None
    """None until the pod exists."""
    pod_conflict: str | None = None
    """Set when the pod's name is taken by a pod this Sandbox does not own."""
    pod_refused: str | None = None
    """Set when the API server refused to create the pod (its words)."""
    node_problem: str | None = None
    """Set when the pod's node stopped answering (see node_trouble)."""
    expiry: Expiry | None = None
    expected_boundary: Boundary | None = None
    """What the profile claims; None makes no claim (an unsafe profile's runtime)."""
    observed_boundary: Boundary | None = None
    node_not_prepared: str | None = None
    """Set while the Sandbox waits for a pod because its last one's node did not give it
    what a sandbox needs (the message names the node and what it lacked)."""
    denials: tuple[Denial, ...] = ()
    """Policies seen in force in this reconcile (an OOM-killed pod, an expiry), oldest first."""


@dataclass(frozen=True, slots=True)
class _Verdict:
    type: ConditionType
    status: ConditionStatus
    reason: Reason
    message: str


def compute_conditions(
    observation: Observation,
    generation: int,
    previous_conditions: Iterable[Mapping[str, Any]],
    now: datetime,
) -> list[Condition]:
    """Ready first, then what it summarises: ProfileResolved, RuntimeAvailable, PodReady.

    A condition whose status is unchanged keeps its lastTransitionTime from
    previous_conditions; every condition carries generation as its observedGeneration.
    """
    profile = _profile_resolved(observation)
    runtime = _runtime_available(observation)
    pod = _pod_ready(observation)
    verdicts = [_ready(observation, (profile, runtime, pod)), profile, runtime, pod]
    previous = {condition.get("type"): condition for condition in previous_conditions}
    stamp = format_timestamp(now)
    return [
        _condition(verdict, generation, previous.get(verdict.type), stamp) for verdict in verdicts
    ]


def status_changed(old_status: Mapping[str, Any] | None, new_status: Mapping[str, Any]) -> bool:
    """Whether new_status differs from old_status in anything but the order of conditions."""
    return _comparable(old_status or {}) != _comparable(new_status)


def _profile_resolved(observation: Observation) -> _Verdict:
    kind = ConditionType.PROFILE_RESOLVED
    problem = observation.profile_problem
    if problem is not None:
        return _Verdict(kind, "False", problem.reason, problem.message)
    return _Verdict(kind, "True", Reason.PROFILE_RESOLVED, "the profile resolved")


def _runtime_available(observation: Observation) -> _Verdict:
    kind = ConditionType.RUNTIME_AVAILABLE
    expected, observed = observation.expected_boundary, observation.observed_boundary
    if observation.profile_problem is not None:
        return _Verdict(
            kind,
            "Unknown",
            Reason.PROFILE_NOT_RESOLVED,
            "the runtime is checked once the profile resolves",
        )
    if expected is not None and observed is not None and expected != observed:
        return _Verdict(
            kind,
            "False",
            Reason.BOUNDARY_MISMATCH,
            f"the profile claims the {expected} boundary but the pod runs behind {observed}",
        )
    if observation.node_not_prepared is not None:
        return _Verdict(kind, "False", Reason.NODE_NOT_PREPARED, observation.node_not_prepared)
    if observation.runtime_available is False:
        message = observation.runtime_message or "the profile's RuntimeClass is not available"
        return _Verdict(kind, "False", Reason.RUNTIME_UNAVAILABLE, message)
    if observation.runtime_available is None:
        return _Verdict(
            kind, "Unknown", Reason.RUNTIME_NOT_CHECKED, "the runtime is not checked yet"
        )
    pod = observation.pod
    if expected is not None and observed is None and pod is not None and pod.ready:
        # Fail closed: the pod is not Ready for callers until its boundary is seen.
        return _Verdict(
            kind,
            "Unknown",
            Reason.RUNTIME_NOT_CHECKED,
            f"the pod runs; the {expected} boundary inside it is not confirmed yet",
        )
    message = observation.runtime_message or "the profile's RuntimeClass is available"
    if observed is not None:
        message = f"{message}; the pod runs behind {observed}"
    return _Verdict(kind, "True", Reason.RUNTIME_AVAILABLE, message)


def _pod_ready(observation: Observation) -> _Verdict:
    kind = ConditionType.POD_READY
    pod = observation.pod
    if observation.pod_conflict is not None:
        return _Verdict(kind, "False", Reason.POD_CONFLICT, observation.pod_conflict)
    if observation.pod_refused is not None:
        return _Verdict(kind, "False", Reason.POD_NOT_CREATED, observation.pod_refused)
    if pod is None:
        if observation.profile_problem is not None or observation.runtime_available is False:
            return _Verdict(
                kind,
                "False",
                Reason.POD_NOT_CREATED,
                "the pod is created once the profile resolves and its runtime is available",
            )
        return _Verdict(kind, "False", Reason.POD_PENDING, "the pod is not created yet")
    if pod.terminated:
        return _Verdict(kind, "False", Reason.POD_FAILED, _termination_message(pod))
    if observation.node_problem is not None:
        return _Verdict(kind, "False", Reason.NODE_LOST, observation.node_problem)
    if pod.ready:
        return _Verdict(kind, "True", Reason.POD_READY, "the pod is running and ready")
    pull_failure = image_not_pulled(pod)
    if pull_failure is not None:
        return _Verdict(kind, "False", Reason.IMAGE_NOT_PULLED, pull_failure)
    message = ": ".join(
        part for part in (f"the pod is {pod.phase}", pod.reason, pod.message) if part
    )
    return _Verdict(kind, "False", Reason.POD_PENDING, message)


def _termination_message(pod: PodState) -> str:
    what = pod.reason or pod.phase
    if pod.exit_code is not None:
        what += f" (exit code {pod.exit_code})"
    if pod.message:
        what += f": {pod.message}"
    if pod.reason == "OOMKilled":
        what += "; files in /tmp and /workspace count against the memory limit"
    return f"the sandbox has ended and cannot be used again: {what}"


def _ready(observation: Observation, summarised: Sequence[_Verdict]) -> _Verdict:
    kind = ConditionType.READY
    for verdict in summarised:
        # Claiming a boundary the pod does not have outranks everything, expiry included.
        if verdict.reason is Reason.BOUNDARY_MISMATCH:
            return _Verdict(kind, "False", verdict.reason, verdict.message)
    expiry = observation.expiry
    if expiry is not None and expiry.expired:
        limit = "reached its max age" if expiry.reason == "MaxAge" else "was idle too long"
        when = format_timestamp(expiry.expires_at)
        message = f"the sandbox {limit} at {when} and will be deleted"
        return _Verdict(kind, "False", Reason.EXPIRED, message)
    for status in ("False", "Unknown"):
        for verdict in summarised:
            if verdict.status == status:
                return _Verdict(kind, status, verdict.reason, verdict.message)
    return _Verdict(kind, "True", Reason.READY, "the sandbox is ready to run commands")


def _condition(
    verdict: _Verdict, generation: int, previous: Mapping[str, Any] | None, stamp: str
) -> Condition:
    transition = stamp
    if previous is not None and previous.get("status") == verdict.status:
        earlier = previous.get("lastTransitionTime")
        if isinstance(earlier, str) and earlier:
            transition = earlier
    return Condition(
        type=verdict.type.value,
        status=verdict.status,
        reason=verdict.reason.value,
        message=verdict.message[:_MAX_MESSAGE],
        observedGeneration=generation,
        lastTransitionTime=transition,
    )


def _comparable(status: Mapping[str, Any]) -> dict[str, Any]:
    comparable = {key: plain(value) for key, value in status.items()}
    conditions = comparable.get("conditions")
    if isinstance(conditions, list):
        comparable["conditions"] = sorted(conditions, key=_condition_type)
    return comparable


def _condition_type(condition: object) -> str:
    return str(condition.get("type")) if isinstance(condition, dict) else ""
