"""When a sandbox expires: pure arithmetic over its timestamps and its profile's lifetime."""

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from openblox.models import Lifetime, LifetimeTooLong, Profile, Sandbox

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
