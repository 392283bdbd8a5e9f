"""Which of two copies of one object is older, by their resourceVersions.

Since Kubernetes 1.35 (KEP-5504, stable) the resourceVersions of one resource's objects
are comparable: a well-formed one is a positive decimal integer with no leading zero,
and a larger one is a later write. Older servers give no such promise, so a version that
is not well-formed compares with nothing and the caller keeps its old behaviour.
"""

from __future__ import annotations

from typing import TypeGuard


def _well_formed(version: str | None) -> TypeGuard[str]:
    return (
        version is not None
        and version.isascii()
        and version.isdigit()
        and not version.startswith("0")
    )


def is_older(candidate: str | None, current: str | None) -> bool:
    """True only when both versions are well-formed and `candidate` was written first.

    Comparing as strings (length, then digits) needs no bound on their size."""
    if not (_well_formed(candidate) and _well_formed(current)):
        return False
    return (len(candidate), candidate) < (len(current), current)
