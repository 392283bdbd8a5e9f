"""The `Backend` protocol: what an implementation must offer to be measured.

A backend creates a sandbox from a profile name, runs argv in it, and deletes it. That is
enough for most properties. The rest depend on optional capabilities that a backend
declares in ``unsupported`` (capability -> reason) when it lacks them; the suite then
reports every property of that tier as *unsupported* with the reason, instead of
pretending it passed or quietly skipping it. Anything else a backend cannot do (create
fails, exec breaks) makes the property FAIL with the reason.

A minimal adapter for another implementation::

    class MyBackend:
        name = "mine"
        unsupported = {Capability.CONTROL_PLANE: "no API of its own to attack"}
        def setup(self, run_id: str) -> None: ...
        def teardown(self) -> None: ...
        def create(self, profile, *, idle_timeout_seconds=None, max_age_seconds=None) -> Handle: ...
        def exec(self, handle, argv, *, stdin=None, timeout) -> ExecOutcome: ...
        def delete(self, handle) -> None: ...
        def exists(self, handle) -> bool: ...
        def recover(self, handle, timeout) -> Handle: ...
        def files(self, handle) -> Files: ...
        control_plane = None

and ``python -m openblox.conformance --backend-class mymodule:MyBackend``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable


class Capability(StrEnum):
    """Optional abilities; a backend lacking one names it in ``unsupported`` with a reason."""

    LIFETIME = "lifetime"
    """Create with an idle timeout / max age, and tell whether a sandbox still exists."""
    FILES = "files"
    """A file API (write/read/list by path) beside exec, whose paths can be attacked."""
    CONTROL_PLANE = "control_plane"
    """The openblox Kubernetes API (Sandbox objects, profiles, admission) to attack as a
    second, unprivileged identity."""


class BackendError(Exception):
    """The backend could not do what was asked (create, exec, delete); the reason is the text."""


@dataclass(frozen=True)
class Limits:
    """What the sandbox is declared to be capped at; None where nothing is declared."""

    cpu_millis: int | None = None
    memory_bytes: int | None = None
    scratch_bytes: int | None = None
    processes: int | None = None
    output_bytes: int | None = None
    exec_timeout_seconds: float | None = None


@dataclass
class Handle:
    """One sandbox. ``pod`` and ``pod_namespace`` are set by Kubernetes-based backends; the
    suite then reads the pod (node, IP) to aim probes, and never changes it."""

    name: str
    profile: str
    limits: Limits = field(default_factory=Limits)
    pod: str | None = None
    pod_namespace: str | None = None
    uid: str | None = None
    native: Any = None
    """The backend's own object for this sandbox."""


@dataclass(frozen=True)
class ExecOutcome:
    """What running argv in a sandbox gave back.

    ``error`` is set when the exec itself broke (stream cut, sandbox gone) and the command's
    result is unknown; stdout and stderr then hold whatever arrived.
    """

    stdout: bytes
    stderr: bytes
    exit_code: int | None
    timed_out: bool = False
    truncated: bool = False
    duration: float = 0.0
    error: str | None = None


@runtime_checkable
class Files(Protocol):
    """A file API that takes paths from the caller (the attack surface of FS-005/FS-006)."""

    def write(self, path: str, data: bytes) -> None: ...

    def read(self, path: str) -> bytes: ...

    def list(self, path: str) -> Sequence[Mapping[str, Any]]: ...


@dataclass(frozen=True)
class ControlPlane:
    """Where the openblox API is, for the control-plane tier (see checks/control_plane.py).

    ``sandbox_namespace`` holds the sandboxes this backend creates; the suite binds its
    unprivileged identity there. ``other_namespace`` is a second opted-in namespace where
    that identity has no rights. ``unavailable_profile`` names a profile whose runtime is
    missing from the cluster (for the fail-closed property).
    """

    sandbox_namespace: str
    other_namespace: str
    unopted_namespace: str
    operator_namespace: str
    profiles_configmap: str
    unavailable_profile: str | None
    create_in: Callable[[str, str], Handle]
    """``create_in(namespace, profile)``: a ready sandbox in another namespace."""


class Backend(Protocol):
    """An implementation under test. See the module docstring for a minimal adapter."""

    name: str
    unsupported: Mapping[Capability, str]
    control_plane: ControlPlane | None

    def setup(self, run_id: str) -> None:
        """Prepare (namespaces, credentials); ``run_id`` is unique to this run."""

    def teardown(self) -> None:
        """Remove whatever setup and create left behind."""

    def create(
        self,
        profile: str,
        *,
        idle_timeout_seconds: int | None = None,
        max_age_seconds: int | None = None,
    ) -> Handle:
        """A ready sandbox from the profile; raises BackendError with the reason it is not."""

    def exec(
        self,
        handle: Handle,
        argv: Sequence[str],
        *,
        stdin: bytes | None = None,
        timeout: float,
    ) -> ExecOutcome:
        """Run argv (no shell); must return within timeout plus a small grace."""

    def delete(self, handle: Handle) -> None:
        """Delete the sandbox; a sandbox already gone is not an error."""

    def exists(self, handle: Handle) -> bool:
        """Whether the sandbox still exists (needed by the lifetime tier)."""

    def recover(self, handle: Handle, timeout: float) -> Handle:
        """Get a working sandbox back after the guest broke it, the way a caller would."""

    def files(self, handle: Handle) -> Files:
        """The backend's file API for this sandbox."""
