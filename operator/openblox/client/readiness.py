"""When a Sandbox is ready, or will not become so by waiting: pure, on its body."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from openblox.names import ConditionType, Reason

# Reasons a Sandbox will not get past by waiting: the caller hears at once.
TERMINAL_REASONS = frozenset(
    {
        Reason.PROFILE_NOT_FOUND,
        Reason.PROFILE_NOT_ALLOWED,
        Reason.PROFILE_INVALID,
        Reason.LIFETIME_TOO_LONG,
        Reason.SANDBOX_INVALID,
        Reason.RUNTIME_UNAVAILABLE,
        Reason.BOUNDARY_MISMATCH,
        Reason.POD_CONFLICT,
        Reason.EXPIRED,
    }
)


def ready_condition(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for condition in (body.get("status") or {}).get("conditions") or []:
        if condition.get("type") == ConditionType.READY:
            return dict(condition)
    return None


def settled(body: Mapping[str, Any]) -> bool:
    """Ready, or stopped for a reason waiting will not change."""
    condition = ready_condition(body)
    return bool(
        condition
        and (condition.get("status") == "True" or condition.get("reason") in TERMINAL_REASONS)
    )
