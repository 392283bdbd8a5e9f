"""The Sandbox custom resource, parsed once from the API server's JSON body."""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any, TypeVar

from openblox.models.errors import SandboxError
from openblox.names import ANNOTATION_LAST_ACTIVITY
from openblox.timestamps import parse_timestamp


@dataclass(frozen=True, slots=True)
class SandboxSpec:
    profile: str
    idle_timeout_seconds: int | None = None
    max_age_seconds: int | None = None


_EMPTY: Mapping[str, Any] = MappingProxyType({})


def _empty() -> Mapping[str, Any]:
    return _EMPTY


_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Sandbox:
    name: str
    namespace: str
    uid: str
    generation: int
    creation_timestamp: datetime
    spec: SandboxSpec
    labels: Mapping[str, str] = field(default_factory=_empty)
    annotations: Mapping[str, str] = field(default_factory=_empty)
    deletion_timestamp: datetime | None = None
    status: Mapping[str, Any] = field(default_factory=_empty)
    """As last written by the operator; read it, never trust it for decisions."""
    resource_version: str = ""
    """Which write of the Sandbox this copy is: of two copies, the caches keep the later."""

    @property
    def last_activity(self) -> datetime | None:
        """When a caller last used the sandbox, stamped by the API-side client, never the guest.

        An absent or unparsable annotation counts as no activity, so idle time runs from
        creation: a bad annotation can shorten a sandbox's life but never lengthen it.
        """
        text = self.annotations.get(ANNOTATION_LAST_ACTIVITY)
        if text is None:
            return None
        try:
            return parse_timestamp(text)
        except ValueError:
            return None

    @property
    def conditions(self) -> list[Mapping[str, Any]]:
        conditions = self.status.get("conditions")
        if not isinstance(conditions, list):
            return []
        return [condition for condition in conditions if isinstance(condition, Mapping)]


def parse_sandbox(body: Mapping[str, Any]) -> Sandbox:
    """Reads a Sandbox from its JSON body (a dict, or kopf's Body); raises SandboxError."""
    metadata = _mapping(body, "metadata", required=True)
    spec = _mapping(body, "spec", required=True)
    return Sandbox(
        name=_string(metadata, "metadata.name"),
        namespace=_string(metadata, "metadata.namespace"),
        uid=_string(metadata, "metadata.uid"),
        generation=_required(_integer, metadata, "metadata.generation"),
        creation_timestamp=_required(_timestamp, metadata, "metadata.creationTimestamp"),
        spec=SandboxSpec(
            profile=_string(spec, "spec.profile"),
            idle_timeout_seconds=_integer(spec, "spec.idleTimeoutSeconds"),
            max_age_seconds=_integer(spec, "spec.maxAgeSeconds"),
        ),
        labels=_string_map(metadata, "metadata.labels"),
        annotations=_string_map(metadata, "metadata.annotations"),
        deletion_timestamp=_timestamp(metadata, "metadata.deletionTimestamp"),
        status=MappingProxyType(plain(_mapping(body, "status"))),
        resource_version=str(metadata.get("resourceVersion") or ""),
    )


def _key(path: str) -> str:
    return path.rpartition(".")[2]


def _mapping(parent: Mapping[str, Any], path: str, *, required: bool = False) -> Mapping[str, Any]:
    value = parent.get(_key(path))
    if value is None and not required:
        return _EMPTY
    if not isinstance(value, Mapping):
        raise SandboxError(f"Sandbox {path} must be an object")
    return value


def _string(parent: Mapping[str, Any], path: str) -> str:
    value = parent.get(_key(path))
    if not isinstance(value, str) or not value:
        raise SandboxError(f"Sandbox {path} must be a non-empty string")
    return value


def _required(
    read: Callable[[Mapping[str, Any], str], _T | None], parent: Mapping[str, Any], path: str
) -> _T:
    value = read(parent, path)
    if value is None:
        raise SandboxError(f"Sandbox {path} is missing")
    return value


def _integer(parent: Mapping[str, Any], path: str) -> int | None:
    value = parent.get(_key(path))
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SandboxError(f"Sandbox {path} must be a positive integer")
    return value


def _timestamp(parent: Mapping[str, Any], path: str) -> datetime | None:
    value = parent.get(_key(path))
    if value is None:
        return None
    # The typed Kubernetes client hands over datetimes; JSON bodies carry strings.
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value
    if isinstance(value, str):
        try:
            return parse_timestamp(value)
        except ValueError:
            pass
    raise SandboxError(f"Sandbox {path} must be an RFC 3339 timestamp")


def _string_map(parent: Mapping[str, Any], path: str) -> Mapping[str, str]:
    value = _mapping(parent, path)
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise SandboxError(f"Sandbox {path} must map strings to strings")
    return MappingProxyType(dict(value))


def plain(value: Any) -> Any:
    """A deep copy as plain dicts and lists, detached from the caller's (possibly live) body."""
    if isinstance(value, Mapping):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    return value
