"""Which sandboxes the reaper deletes now: pure, so a pass over many is cheap and testable."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime

from openblox.lifetime.expiry import Expiry, compute_expiry, effective_lifetime
from openblox.models import LifetimeTooLong, Profile, Sandbox


def find_expired(
    sandboxes: Iterable[Sandbox], profiles: Mapping[str, Profile], now: datetime
) -> Iterator[tuple[Sandbox, Expiry]]:
    """Every sandbox past its idle or max-age deadline.

    A sandbox whose profile is unknown, or that asks for more than its profile allows,
    never got a pod; it is not reaped here but keeps its condition explaining why.
    """
    for sandbox in sandboxes:
        expiry = expiry_of(sandbox, profiles, now)
        if expiry is not None and expiry.expired:
            yield sandbox, expiry


def expiry_of(sandbox: Sandbox, profiles: Mapping[str, Profile], now: datetime) -> Expiry | None:
    """When the reaper deletes this Sandbox; None if it never will (being deleted already,
    an unknown profile, or a lifetime its profile refuses: it never got a pod)."""
    if sandbox.deletion_timestamp is not None:
        return None
    profile = profiles.get(sandbox.spec.profile)
    if profile is None:
        return None
    try:
        lifetime = effective_lifetime(sandbox, profile)
    except LifetimeTooLong:
        return None
    return compute_expiry(sandbox, lifetime, now)
