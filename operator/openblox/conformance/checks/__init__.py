"""The checks, one per property in the registry (properties.py); each returns a Verdict."""

from openblox.conformance.checks import (  # noqa: F401  (importing registers the checks)
    boundary,
    control_plane,
    control_plane_pods,
    control_plane_status,
    filesystem,
    identity,
    lifetime,
    network,
    resources,
)
from openblox.conformance.checks.registry import CHECKS, Check

__all__ = ["CHECKS", "Check"]
