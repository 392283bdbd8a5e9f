"""Sandbox lifetime: what a Sandbox may ask for and when it expires."""

from openblox.lifetime.expiry import Expiry, ExpiryReason, compute_expiry, effective_lifetime
from openblox.models import Lifetime, LifetimeTooLong

__all__ = [
    "Expiry",
    "ExpiryReason",
    "Lifetime",
    "LifetimeTooLong",
    "compute_expiry",
    "effective_lifetime",
]
