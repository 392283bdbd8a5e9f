"""Pure builders: Kubernetes manifests and status computed from models, with no I/O.

Modules here import only openblox.names, openblox.models, openblox.lifetime and the
standard library (tests/unit/test_layering.py holds them to it).
"""

from openblox.builders.conditions import (
    Condition,
    ConditionStatus,
    Observation,
    Problem,
    compute_conditions,
    status_changed,
)
from openblox.builders.network_policy import build_network_policy
from openblox.builders.pod import build_pod, is_owned_by, owner_reference, pod_labels, pod_name
from openblox.builders.pod_state import PodState

__all__ = [
    "Condition",
    "ConditionStatus",
    "Observation",
    "PodState",
    "Problem",
    "build_network_policy",
    "build_pod",
    "compute_conditions",
    "is_owned_by",
    "owner_reference",
    "pod_labels",
    "pod_name",
    "status_changed",
]
