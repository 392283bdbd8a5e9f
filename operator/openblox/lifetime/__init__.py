"""Sandbox lifetime: what a Sandbox may ask for and when it expires."""

from openblox.lifetime.expiry import (
    Expiry,
    ExpiryReason,
    bounded_lifetime,
    compute_expiry,
    effective_lifetime,
    recorded_expiry,
    remaining_max_age_seconds,
)
from openblox.models import Lifetime, LifetimeTooLong

__all__ = [
    "Expiry",
    "ExpiryReason",
    "Lifetime",
    "LifetimeTooLong",
    "bounded_lifetime",
    "compute_expiry",
    "effective_lifetime",
    "recorded_expiry",
    "remaining_max_age_seconds",
]
