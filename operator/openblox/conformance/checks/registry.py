"""Check functions by property ID: ``@check("NET-001")`` registers one."""

from __future__ import annotations

from collections.abc import Callable

from openblox.conformance.context import Context, Verdict

Check = Callable[[Context], Verdict]
CHECKS: dict[str, Check] = {}


def check(property_id: str) -> Callable[[Check], Check]:
    def register(function: Check) -> Check:
        if property_id in CHECKS:
            raise ValueError(f"two checks for {property_id}")
        CHECKS[property_id] = function
        return function

    return register
