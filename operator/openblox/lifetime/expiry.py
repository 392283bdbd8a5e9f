"""When a sandbox expires: pure arithmetic over its timestamps and its profile's lifetime."""

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from openblox.models import Lifetime, LifetimeTooLong, Profile, Sandbox
from openblox.timestamps import parse_optional_timestamp

ExpiryReason = Literal["MaxAge", "Idle"]


@dataclass(frozen=True, slots=True)
class Expiry:
    expires_at: datetime
    reason: ExpiryReason
    expired: bool


def effective_lifetime(sandbox: Sandbox, profile: Profile) -> Lifetime:
    """The profile's lifetime, shortened where the Sandbox asks; raises LifetimeTooLong."""
    return Lifetime(
        idle_timeout_seconds=_shortened(
            "idleTimeoutSeconds",
            sandbox.spec.idle_timeout_seconds,
            profile.lifetime.idle_timeout_seconds,
            profile.name,
        ),
        max_age_seconds=_shortened(
            "maxAgeSeconds",
            sandbox.spec.max_age_seconds,
            profile.lifetime.max_age_seconds,
            profile.name,
        ),
    )


def bounded_lifetime(sandbox: Sandbox, profile: Profile) -> Lifetime:
    """The lifetime the reaper holds a Sandbox to: each limit the shorter of its own and
    its profile's. Never raises: a Sandbox that asks for more than its profile allows
    now (the profile was shortened since it was admitted) is held to the profile, so a
    change an admin makes can shorten a life but never leave it without a deadline."""
    return Lifetime(
        idle_timeout_seconds=min(
            sandbox.spec.idle_timeout_seconds or profile.lifetime.idle_timeout_seconds,
            profile.lifetime.idle_timeout_seconds,
        ),
        max_age_seconds=min(
            sandbox.spec.max_age_seconds or profile.lifetime.max_age_seconds,
            profile.lifetime.max_age_seconds,
        ),
    )


def recorded_expiry(sandbox: Sandbox, now: datetime) -> Expiry | None:
    """The deadline the operator last wrote in the Sandbox's status, for a Sandbox whose
    profile is gone: what was promised when it had one still holds. Only the operator
    may write the status subresource, and a bad or missing record gives None."""
    expires_at = parse_optional_timestamp(sandbox.status.get("expiresAt"))
    if expires_at is None:
        return None
    reason: ExpiryReason = "Idle" if sandbox.status.get("expiryReason") == "Idle" else "MaxAge"
    return Expiry(expires_at, reason, expired=now >= expires_at)


def remaining_max_age_seconds(sandbox: Sandbox, lifetime: Lifetime, now: datetime) -> int:
    """Whole seconds from `now` until the Sandbox's max age, at least 1: the deadline of a
    pod started now, which must end with its Sandbox however late in life it came."""
    deadline = sandbox.creation_timestamp + timedelta(seconds=lifetime.max_age_seconds)
    return max(1, math.ceil((deadline - now).total_seconds()))


def compute_expiry(sandbox: Sandbox, lifetime: Lifetime, now: datetime) -> Expiry:
    """The earlier of the idle and max-age deadlines; at a tie, max age is the reason.

    Idle time runs from the last recorded activity, or from creation if there is none.
    An activity stamp in the future can postpone the idle deadline but never max age.
    """
    if now.tzinfo is None:
        raise ValueError("now must be an aware datetime")
    max_age_deadline = sandbox.creation_timestamp + timedelta(seconds=lifetime.max_age_seconds)
    # Capped at max age, which comes first anyway: a stamp such as year 9999 (any caller
    # who may patch the Sandbox can write one) would otherwise overflow the date, and
    # the error would stop the reaper's pass for every sandbox.
    idle_since = min(
        max(sandbox.last_activity or sandbox.creation_timestamp, sandbox.creation_timestamp),
        max_age_deadline,
    )
    idle_deadline = idle_since + timedelta(seconds=lifetime.idle_timeout_seconds)
    if max_age_deadline <= idle_deadline:
        return Expiry(max_age_deadline, "MaxAge", expired=now >= max_age_deadline)
    return Expiry(idle_deadline, "Idle", expired=now >= idle_deadline)


def _shortened(field: str, asked: int | None, allowed: int, profile_name: str) -> int:
    if asked is None:
        return allowed
    if asked > allowed:
        raise LifetimeTooLong(field, asked, allowed, profile_name)
    return asked
