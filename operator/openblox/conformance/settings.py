"""What a run is pointed at, from the command line or from ``OPENBLOX_CONFORMANCE_*``.

Environment variables (for ``pytest --pyargs openblox.conformance``, which has no options
of its own):

- ``OPENBLOX_CONFORMANCE_BACKEND``: ``operator`` (default), ``operator-raw-exec`` (the
  same sandboxes, every command through plain ``pods/exec``), ``bare-runc``, or
  ``module:Class`` for an adapter of your own
- ``OPENBLOX_CONFORMANCE_PROFILES``: comma-separated profiles (default ``code-exec``)
- ``OPENBLOX_CONFORMANCE_ONLY``: comma-separated property IDs or prefixes (``NET,IDN-002``)
- ``OPENBLOX_CONFORMANCE_OUT``: directory for the scorecards
- ``OPENBLOX_CONFORMANCE_IMAGE``: image for canaries and the bare pod
- ``OPENBLOX_CONFORMANCE_UNAVAILABLE_PROFILE``: a profile whose runtime is missing
  (default ``code-exec-kata``; empty: none, and CTL-008 fails saying so)
- ``OPENBLOX_CONFORMANCE_RESTRICTED_PROFILE``: a profile not allowed in the suite's
  namespaces (optional; CTL-004 also tries it)
- ``OPENBLOX_CONFORMANCE_PROCESSES``: the process cap the profile declares (default 256)
- ``OPENBLOX_CONFORMANCE_KEEP``: ``1`` keeps the run's namespaces for debugging
- ``KUBECONFIG``: the cluster (without it, in a pod, its ServiceAccount; the order is
  ``openblox.transport.credentials``)
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

DEFAULT_IMAGE = "openblox.local/sandbox:0.1.0"


def _list(text: str | None) -> list[str]:
    return [item.strip() for item in (text or "").split(",") if item.strip()]


@dataclass
class Settings:
    backend: str = "operator"
    profiles: list[str] = field(default_factory=lambda: ["code-exec"])
    only: list[str] = field(default_factory=list)
    kubeconfig: str | None = None
    image: str = DEFAULT_IMAGE
    image_pull_policy: str | None = None
    """None: IfNotPresent. The project's own clusters resolve openblox.local to their
    registry, where the version tags are pushed (docs/adr/0021)."""
    unavailable_profile: str | None = "code-exec-kata"
    restricted_profile: str | None = None
    processes: int = 256
    uid: int = 1000
    gid: int = 1000
    create_timeout: float = 300.0
    out: str | None = None
    keep: bool = False

    def default_profiles(self) -> list[str]:
        """code-exec for the operator; "none" for backends without profiles (bare-runc)."""
        return ["none"] if self.backend in ("bare-runc", "bare_runc", "runc") else ["code-exec"]

    @property
    def pull_policy(self) -> str:
        return self.image_pull_policy or "IfNotPresent"

    @classmethod
    def from_environment(cls) -> Settings:
        env = os.environ.get
        settings = cls()
        settings.backend = env("OPENBLOX_CONFORMANCE_BACKEND") or settings.backend
        settings.profiles = (
            _list(env("OPENBLOX_CONFORMANCE_PROFILES")) or settings.default_profiles()
        )
        settings.only = _list(env("OPENBLOX_CONFORMANCE_ONLY"))
        settings.out = env("OPENBLOX_CONFORMANCE_OUT") or None
        settings.image = env("OPENBLOX_CONFORMANCE_IMAGE") or settings.image
        if "OPENBLOX_CONFORMANCE_UNAVAILABLE_PROFILE" in os.environ:
            settings.unavailable_profile = env("OPENBLOX_CONFORMANCE_UNAVAILABLE_PROFILE") or None
        settings.restricted_profile = env("OPENBLOX_CONFORMANCE_RESTRICTED_PROFILE") or None
        settings.processes = int(env("OPENBLOX_CONFORMANCE_PROCESSES") or settings.processes)
        settings.keep = env("OPENBLOX_CONFORMANCE_KEEP") == "1"
        return settings
