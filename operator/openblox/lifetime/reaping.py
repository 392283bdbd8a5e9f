"""Which sandboxes the reaper deletes now: pure, so a pass over many is cheap and testable."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime

from openblox.lifetime.expiry import Expiry, bounded_lifetime, compute_expiry, recorded_expiry
from openblox.models import Profile, Sandbox


def find_expired(
    sandboxes: Iterable[Sandbox], profiles: Mapping[str, Profile], now: datetime
) -> Iterator[tuple[Sandbox, Expiry]]:
    """Every sandbox past its idle or max-age deadline (`expiry_of`)."""
    for sandbox in sandboxes:
        expiry = expiry_of(sandbox, profiles, now)
        if expiry is not None and expiry.expired:
            yield sandbox, expiry


def expiry_of(sandbox: Sandbox, profiles: Mapping[str, Profile], now: datetime) -> Expiry | None:
    """When the reaper deletes this Sandbox, whatever changed since it was made.

    Its profile is looked up by name only: a namespace that no longer allows the profile
    does not stop the clock, and a profile shortened since holds the Sandbox to the new
    bound (`bounded_lifetime`). A profile deleted since leaves the deadline its status
    recorded. None only for a Sandbox being deleted already, or one that never had a
    deadline (its profile never existed here, so it never got a pod).
    """
    if sandbox.deletion_timestamp is not None:
        return None
    profile = profiles.get(sandbox.spec.profile)
    if profile is None:
        return recorded_expiry(sandbox, now)
    return compute_expiry(sandbox, bounded_lifetime(sandbox, profile), now)
