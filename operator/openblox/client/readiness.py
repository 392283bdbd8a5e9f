"""When a Sandbox is ready, or will not become so by waiting: pure, on its body."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Reasons a Sandbox will not get past by waiting: the caller hears at once.
TERMINAL_REASONS = frozenset(
    {
        "ProfileNotFound",
        "ProfileNotAllowed",
        "ProfileInvalid",
        "LifetimeTooLong",
        "SandboxInvalid",
        "RuntimeUnavailable",
        "BoundaryMismatch",
        "PodConflict",
        "Expired",
    }
)


def ready_condition(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for condition in (body.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return dict(condition)
    return None


def settled(body: Mapping[str, Any]) -> bool:
    """Ready, or stopped for a reason waiting will not change."""
    condition = ready_condition(body)
    return bool(
        condition
        and (condition.get("status") == "True" or condition.get("reason") in TERMINAL_REASONS)
    )
