"""What the built-in backends share: each runs its sandboxes as pods in a namespace of
the run, is made with ``(kube, settings)`` as ``load_backend`` makes every backend, and
answers ``Backend.create`` and ``Backend.exec`` by its own way of making a sandbox
(``_create``) and of running a command (``_run``).

The keyword signatures of ``create`` and ``exec`` are the protocol's
(openblox.conformance.backend), written once here; a backend says only what it does.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from openblox.conformance.backend import ControlPlane, ExecOutcome, Handle
from openblox.conformance.cluster_api import Kube
from openblox.conformance.settings import Settings


class PodBackend(ABC):
    control_plane: ControlPlane | None = None
    """None until ``setup`` says where the control plane is, and for good if it has none."""

    def __init__(self, kube: Kube, settings: Settings) -> None:
        self.kube = kube
        self.settings = settings
        self.namespace = ""
        """Where this run's sandboxes live; set by ``setup``."""

    def create(
        self,
        profile: str,
        *,
        idle_timeout_seconds: int | None = None,
        max_age_seconds: int | None = None,
    ) -> Handle:
        return self._create(profile, idle_timeout_seconds, max_age_seconds)

    def exec(
        self,
        handle: Handle,
        argv: Sequence[str],
        *,
        stdin: bytes | None = None,
        timeout: float,
    ) -> ExecOutcome:
        return self._run(handle, argv, stdin, timeout)

    @abstractmethod
    def _create(
        self, profile: str, idle_timeout_seconds: int | None, max_age_seconds: int | None
    ) -> Handle:
        """A ready sandbox, with the lifetime asked for (None: the profile's)."""

    @abstractmethod
    def _run(
        self, handle: Handle, argv: Sequence[str], stdin: bytes | None, timeout: float
    ) -> ExecOutcome:
        """Run argv in the sandbox, its stdin given (or None: no stdin), within timeout."""
