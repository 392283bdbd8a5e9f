"""Typed, immutable views of Sandboxes and profiles, parsed once at the edge from raw dicts."""

from openblox.models.errors import (
    LifetimeTooLong,
    OpenbloxError,
    ProfileError,
    ProfileNotAllowed,
    ProfileNotFound,
    SandboxError,
)
from openblox.models.profile import (
    STATE_VOLUME_SIZE,
    AllowedNamespaces,
    Boundary,
    ExecLimits,
    Lifetime,
    Profile,
    Quantity,
    Resources,
    parse_quantity,
    resolve_profile,
)
from openblox.models.profile_parsing import parse_profile, parse_profiles
from openblox.models.sandbox import Sandbox, SandboxSpec, parse_sandbox

__all__ = [
    "STATE_VOLUME_SIZE",
    "AllowedNamespaces",
    "Boundary",
    "ExecLimits",
    "Lifetime",
    "LifetimeTooLong",
    "OpenbloxError",
    "Profile",
    "ProfileError",
    "ProfileNotAllowed",
    "ProfileNotFound",
    "Quantity",
    "Resources",
    "Sandbox",
    "SandboxError",
    "SandboxSpec",
    "parse_profile",
    "parse_profiles",
    "parse_quantity",
    "parse_sandbox",
    "resolve_profile",
]
