"""`openblox.Client`: create sandboxes from profiles and run code in them, through the API.

Everything goes through the Kubernetes API server: Sandbox objects for lifecycle, and
`pods/exec` for commands and files. Sandbox pods have no network, so nothing here
reaches a pod directly. The client's parts, by role: `cluster` (I/O with the API
server), `handle` (the `Sandbox`), `files`, `background` (named processes), `limits`,
`supervised` (one command's framed output) and `postmortem` (why an exec broke; pure).
"""

from __future__ import annotations

import builtins
import secrets
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from openblox.client.cluster import Cluster
from openblox.client.errors import (
    AdmissionDenied,
    InvalidArgument,
    SandboxGone,
    SandboxNotReady,
    SandboxTimeout,
)
from openblox.client.files import DEFAULT_READ_LIMIT, Files
from openblox.client.handle import Sandbox
from openblox.client.launch import SUPERVISOR_ARGV
from openblox.client.readiness import TERMINAL_REASONS, ready_condition, settled
from openblox.denials import admission_denial
from openblox.names import GROUP, KIND, VERSION
from openblox.transport import BadRequest, Conflict, Forbidden, Invalid, Session

# Kept importable from here, where they were defined before the client was split.
__all__ = ["DEFAULT_READ_LIMIT", "SUPERVISOR_ARGV", "Client", "Files", "Sandbox"]

ADMISSION_PROFILES = "openblox-profile-admission"


class Client:
    """A connection to one cluster; cheap to keep, safe to share between threads.

    Credentials are found in one order (`openblox.transport.credentials`): `kubeconfig`,
    else KUBECONFIG, else the pod's ServiceAccount, else ~/.kube/config. The namespace
    defaults to the one of the same source (the pod's, or the context's).
    """

    def __init__(
        self,
        namespace: str | None = None,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
    ) -> None:
        self._cluster = Cluster(Session.discover(kubeconfig, context))
        self.namespace = namespace or self._cluster.session.namespace

    def create(
        self,
        profile: str,
        name: str | None = None,
        namespace: str | None = None,
        *,
        idle_timeout_seconds: int | None = None,
        max_age_seconds: int | None = None,
        timeout: float = 120.0,
    ) -> Sandbox:
        """Get or create a Sandbox and wait, on a watch, until it is Ready."""
        namespace = namespace or self.namespace
        name = name or f"sbx-{secrets.token_hex(4)}"
        spec: dict[str, Any] = {"profile": profile}
        if idle_timeout_seconds is not None:
            spec["idleTimeoutSeconds"] = idle_timeout_seconds
        if max_age_seconds is not None:
            spec["maxAgeSeconds"] = max_age_seconds
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": KIND,
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        }
        try:
            created: Mapping[str, Any] = self._cluster.create_sandbox(body)
        except Conflict as error:
            existing = self._cluster.read_sandbox(namespace, name)
            if existing is None:
                raise SandboxGone(
                    f"sandbox {namespace}/{name} was deleted while starting"
                ) from error
            if existing["spec"].get("profile") != profile:
                raise InvalidArgument(
                    f"sandbox {namespace}/{name} exists with profile "
                    f"{existing['spec'].get('profile')}, not {profile}"
                ) from error
            created = existing
        except (BadRequest, Forbidden, Invalid) as error:
            record = admission_denial(profile, error.message or error.reason, datetime.now(UTC))
            raise AdmissionDenied(f"sandbox refused: {record.because}", record) from error
        return Sandbox(self._cluster, self._wait_ready(namespace, name, created, timeout))

    def _wait_ready(
        self, namespace: str, name: str, body: Mapping[str, Any], timeout: float
    ) -> Mapping[str, Any]:
        deadline = time.monotonic() + timeout
        last_reason: str | None = None
        current = body
        while True:
            condition = ready_condition(current)
            if condition:
                last_reason = condition.get("reason")
                if condition.get("status") == "True":
                    return current
                if last_reason in TERMINAL_REASONS:
                    raise SandboxNotReady(name, str(last_reason), str(condition.get("message")))
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SandboxTimeout(name, timeout, last_reason)
            resource_version = current["metadata"].get("resourceVersion")
            changes = self._cluster.sandbox_changes(namespace, name, resource_version, remaining)
            for current in changes:
                if settled(current):
                    break

    def get(self, name: str, namespace: str | None = None) -> Sandbox:
        namespace = namespace or self.namespace
        body = self._cluster.read_sandbox(namespace, name)
        if body is None:
            raise SandboxGone(f"sandbox {namespace}/{name} does not exist")
        return Sandbox(self._cluster, body)

    def list(self, namespace: str | None = None) -> builtins.list[Sandbox]:
        items = self._cluster.list_sandboxes(namespace or self.namespace)
        return [Sandbox(self._cluster, item) for item in items]

    def delete(self, name: str, namespace: str | None = None) -> None:
        self._cluster.delete_sandbox(namespace or self.namespace, name)

    def profiles(self) -> builtins.list[str]:
        """Profiles the admission policy will accept (read from the operator's published list)."""
        return sorted(self._cluster.read_config_map(ADMISSION_PROFILES).keys())
