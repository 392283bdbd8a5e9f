"""What `Client` and `AsyncClient` do, once, as plans: create a Sandbox and wait until it is
Ready, get, list and delete Sandboxes, list the profiles.

`H` is the shell's handle type (`Sandbox`, `AsyncSandbox`): the shell says how a Sandbox's
body becomes one of its handles, and the plans return those.
"""

from __future__ import annotations

import builtins
import secrets
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

from openblox.client.cluster import (
    create_sandbox,
    delete_sandbox,
    list_sandboxes,
    read_config_map,
    read_sandbox,
    sandboxes_path,
)
from openblox.client.effects import Next, Plan, closing
from openblox.client.errors import (
    AdmissionDenied,
    InvalidArgument,
    SandboxGone,
    SandboxNotReady,
    SandboxTimeout,
)
from openblox.client.readiness import TERMINAL_REASONS, ready_condition, settled
from openblox.denials import admission_denial
from openblox.names import GROUP, KIND, VERSION
from openblox.transport.errors import (
    AuthorizerRefused,
    BadRequest,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
)
from openblox.transport.rest import Watch

ADMISSION_PROFILES = "openblox-profile-admission"

H = TypeVar("H")


class ClientSteps(Generic[H]):
    """The client's calls as plans, in `namespace` unless a call names another."""

    def __init__(self, namespace: str, handle: Callable[[Mapping[str, Any]], H]) -> None:
        self.namespace = namespace
        self._handle = handle

    def create(
        self,
        profile: str,
        name: str | None = None,
        namespace: str | None = None,
        *,
        idle_timeout_seconds: int | None = None,
        max_age_seconds: int | None = None,
        timeout: float = 120.0,
    ) -> Plan[H]:
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
            created: Mapping[str, Any] = yield from create_sandbox(body)
        except Conflict as error:
            existing = yield from read_sandbox(namespace, name)
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
        except AuthorizerRefused:
            # The caller's credentials, not a policy about the Sandbox: no denial record
            # (and, just after an API server restart, maybe no lasting refusal either).
            raise
        except (BadRequest, Forbidden, Invalid) as error:
            record = admission_denial(profile, error.message or error.reason, datetime.now(UTC))
            raise AdmissionDenied(f"sandbox refused: {record.because}", record) from error
        ready = yield from self._wait_ready(namespace, name, created, timeout)
        return self._handle(ready)

    def _wait_ready(
        self, namespace: str, name: str, body: Mapping[str, Any], timeout: float
    ) -> Plan[Mapping[str, Any]]:
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
            current = yield from _sandbox_change(
                namespace, name, current, resource_version, remaining
            )

    def get(self, name: str, namespace: str | None = None) -> Plan[H]:
        namespace = namespace or self.namespace
        body = yield from read_sandbox(namespace, name)
        if body is None:
            raise SandboxGone(f"sandbox {namespace}/{name} does not exist")
        return self._handle(body)

    def list(self, namespace: str | None = None) -> Plan[builtins.list[H]]:
        items = yield from list_sandboxes(namespace or self.namespace)
        return [self._handle(item) for item in items]

    def delete(self, name: str, namespace: str | None = None) -> Plan[None]:
        yield from delete_sandbox(namespace or self.namespace, name)

    def profiles(self) -> Plan[builtins.list[str]]:
        """Profiles the admission policy will accept (read from the operator's published list)."""
        published = yield from read_config_map(ADMISSION_PROFILES)
        return sorted(published.keys())


def _sandbox_change(
    namespace: str,
    name: str,
    current: Mapping[str, Any],
    resource_version: str | None,
    seconds: float,
) -> Plan[Mapping[str, Any]]:
    """The Sandbox as a watch from `resource_version` shows it, for about `seconds` or until
    it settles (Ready, or stopped for good): the last body seen, or `current` if none came.
    On a watch whose starting point expired (410), the Sandbox as read afresh. A deletion
    raises."""
    events = yield Watch(
        sandboxes_path(namespace),
        resource_version,
        max(1, int(seconds)),
        {"fieldSelector": f"metadata.name={name}"},
    )
    try:
        return (yield from closing(events, _until_settled(events, namespace, name, current)))
    except Gone:
        fresh = yield from read_sandbox(namespace, name)
        if fresh is None:
            raise SandboxGone(f"sandbox {namespace}/{name} does not exist") from None
        return fresh


def _until_settled(
    events: object, namespace: str, name: str, current: Mapping[str, Any]
) -> Plan[Mapping[str, Any]]:
    while (event := (yield Next(events))) is not None:
        if event["type"] == "DELETED":
            raise SandboxGone(f"sandbox {namespace}/{name} was deleted while starting")
        current = event["object"]
        if settled(current):
            break
    return current
