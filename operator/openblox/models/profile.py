"""Profiles: what an admin allows a Sandbox to be, parsed once from the openblox-profiles ConfigMap.

Each ConfigMap key is a profile name and its value is a YAML document (parsed by
`profile_parsing.py`). Every field but ``image`` has a default, and each default is the
most restrictive sensible value.
"""

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from openblox.models.errors import ProfileError, ProfileNotAllowed, ProfileNotFound
from openblox.models.quantity import Quantity, parse_quantity
from openblox.names import (
    LABEL_NAMESPACE_OPT_IN,
    NAMESPACE_OPT_IN_VALUE,
    RUNTIME_CLASS_GVISOR,
    RUNTIME_CLASS_KATA,
)

Boundary = Literal["gvisor", "kata", "none"]
"""The isolation boundary around a sandbox: a user-space kernel, a guest kernel, or none."""

_MI = 1024**2

# The state volume is fixed by the pod layout; profiles size only /tmp and /workspace.
STATE_VOLUME_SIZE = Quantity("16Mi", 16 * _MI)

DEFAULT_COMMAND = ("/usr/bin/tini", "-s", "--", "/bin/sleep", "infinity")
DEFAULT_RUNTIME_CLASS = RUNTIME_CLASS_GVISOR
DEFAULT_ID = 1000
_DEFAULT_CPU = Quantity("1", 1000)
_DEFAULT_MEMORY = Quantity("512Mi", 512 * _MI)
_DEFAULT_SCRATCH = Quantity("128Mi", 128 * _MI)
_DEFAULT_EPHEMERAL_STORAGE = Quantity("64Mi", 64 * _MI)


@dataclass(frozen=True, slots=True)
class Resources:
    cpu: Quantity = _DEFAULT_CPU
    """CPU limit, value in millicores: the CFS quota the sandbox can never exceed."""
    cpu_request: Quantity | None = None
    """CPU the scheduler reserves, at most the limit; None means equal to it (Guaranteed)."""
    memory: Quantity = _DEFAULT_MEMORY
    """Memory limit in bytes; the memory-backed scratch volumes are drawn from it."""
    scratch: Quantity = _DEFAULT_SCRATCH
    """Size of each of the /tmp and /workspace tmpfs volumes, in bytes."""
    ephemeral_storage: Quantity = _DEFAULT_EPHEMERAL_STORAGE
    """Node disk for the container's logs and writable layer, in bytes."""
    processes: int = 256
    """Most processes (threads included) the sandbox may run at once."""

    @property
    def effective_cpu_request(self) -> Quantity:
        """The CPU request the pod carries: below the limit makes the pod Burstable."""
        return self.cpu if self.cpu_request is None else self.cpu_request

    @property
    def memory_backed_bytes(self) -> int:
        """Bytes the tmpfs volumes may take from the memory limit when full."""
        return 2 * self.scratch.value + STATE_VOLUME_SIZE.value


@dataclass(frozen=True, slots=True)
class ExecLimits:
    timeout_seconds: int = 60
    """A command still running after this long is killed."""
    output_bytes: int = 1024 * 1024
    """Captured stdout and stderr together are cut off after this many bytes."""


@dataclass(frozen=True, slots=True)
class Lifetime:
    idle_timeout_seconds: int = 900
    """A sandbox with no activity for this long is deleted."""
    max_age_seconds: int = 3600
    """A sandbox is deleted this long after creation, however busy it is."""


@dataclass(frozen=True, slots=True)
class AllowedNamespaces:
    """Where a profile may be used: namespaces named here, or whose labels match."""

    names: frozenset[str] = frozenset()
    match_labels: tuple[tuple[str, str], ...] | None = None
    """None means no selector; an empty selector matches every namespace, as in Kubernetes."""

    def allows(self, namespace_name: str, namespace_labels: Mapping[str, str]) -> bool:
        if namespace_name in self.names:
            return True
        if self.match_labels is None:
            return False
        return all(namespace_labels.get(key) == value for key, value in self.match_labels)

    def to_dict(self) -> dict[str, Any]:
        document: dict[str, Any] = {}
        if self.names:
            document["names"] = sorted(self.names)
        if self.match_labels is not None:
            document["selector"] = {"matchLabels": dict(self.match_labels)}
        return document


DEFAULT_RESOURCES = Resources()
DEFAULT_EXEC_LIMITS = ExecLimits()
DEFAULT_LIFETIME = Lifetime()


@dataclass(frozen=True, slots=True)
class Profile:
    """A validated profile. Build one with parse_profile; the constructor does not validate."""

    name: str
    image: str
    runtime_class_name: str = DEFAULT_RUNTIME_CLASS
    unsafe: bool = False
    command: tuple[str, ...] = DEFAULT_COMMAND
    user: int = DEFAULT_ID
    group: int = DEFAULT_ID
    resources: Resources = DEFAULT_RESOURCES
    exec: ExecLimits = DEFAULT_EXEC_LIMITS
    lifetime: Lifetime = DEFAULT_LIFETIME
    namespaces: AllowedNamespaces | None = None
    """None means every namespace that has opted in to sandboxes."""

    @property
    def expected_boundary(self) -> Boundary | None:
        """The boundary this profile claims; None for an unsafe profile's unapproved runtime."""
        # The RuntimeClass names and the Boundary values (the kernel seen) are spelled alike.
        if self.runtime_class_name == RUNTIME_CLASS_GVISOR:
            return "gvisor"
        if self.runtime_class_name == RUNTIME_CLASS_KATA:
            return "kata"
        return None

    @property
    def digest(self) -> str:
        """Identifies the profile's content, so pods built from an older version stand out."""
        canonical = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    def allows_namespace(self, namespace_name: str, namespace_labels: Mapping[str, str]) -> bool:
        """Whether this profile may be used in the namespace (opt-in is checked separately)."""
        return self.namespaces is None or self.namespaces.allows(namespace_name, namespace_labels)

    def to_dict(self) -> dict[str, Any]:
        """The profile in its YAML form with every default filled in; parses back to itself."""
        resources = self.resources
        document: dict[str, Any] = {
            "image": self.image,
            "runtimeClassName": self.runtime_class_name,
            "unsafe": self.unsafe,
            "command": list(self.command),
            "user": self.user,
            "group": self.group,
            "resources": {
                "cpu": resources.cpu.text,
                "cpuRequest": resources.effective_cpu_request.text,
                "memory": resources.memory.text,
                "scratch": resources.scratch.text,
                "processes": resources.processes,
                "ephemeralStorage": resources.ephemeral_storage.text,
            },
            "exec": {
                "timeoutSeconds": self.exec.timeout_seconds,
                "outputBytes": self.exec.output_bytes,
            },
            "lifetime": {
                "idleTimeoutSeconds": self.lifetime.idle_timeout_seconds,
                "maxAgeSeconds": self.lifetime.max_age_seconds,
            },
        }
        if self.namespaces is not None:
            document["namespaces"] = self.namespaces.to_dict()
        return document


def resolve_profile(
    name: str,
    namespace: str,
    namespace_labels: Mapping[str, str],
    profiles: Mapping[str, Profile],
    broken: Mapping[str, ProfileError],
) -> Profile:
    """The profile a Sandbox in this namespace gets, or the error explaining why it gets none.

    A name in both mappings (a caller keeping the last good version of a profile whose
    new version is broken) resolves to the good one. Raises ProfileNotAllowed,
    ProfileError (the profile is broken) or ProfileNotFound.
    """
    if namespace_labels.get(LABEL_NAMESPACE_OPT_IN) != NAMESPACE_OPT_IN_VALUE:
        raise ProfileNotAllowed(name, namespace, opted_in=False)
    profile = profiles.get(name)
    if profile is None:
        if name in broken:
            # A fresh exception: re-raising the stored one would grow its traceback each time.
            raise ProfileError(name, broken[name].detail)
        usable_here = [
            other.name
            for other in profiles.values()
            if other.allows_namespace(namespace, namespace_labels)
        ]
        raise ProfileNotFound(name, usable_here)
    if not profile.allows_namespace(namespace, namespace_labels):
        raise ProfileNotAllowed(name, namespace, opted_in=True)
    return profile


__all__ = [
    "DEFAULT_COMMAND",
    "DEFAULT_EXEC_LIMITS",
    "DEFAULT_ID",
    "DEFAULT_LIFETIME",
    "DEFAULT_RESOURCES",
    "DEFAULT_RUNTIME_CLASS",
    "STATE_VOLUME_SIZE",
    "AllowedNamespaces",
    "Boundary",
    "ExecLimits",
    "Lifetime",
    "Profile",
    "Quantity",
    "Resources",
    "parse_quantity",
    "resolve_profile",
]
