"""`openblox.AsyncClient`: the same surface as Client, for asyncio callers, with no threads.

Every call is a coroutine on the caller's event loop: API requests through
`transport.async_api.AsyncApi` and execs through `transport.async_exec.AsyncExecSocket`
(aiohttp, ADR 0011), with the credentials the transport finds in its one documented order.
So hundreds of concurrent execs from one loop are hundreds of websockets, not threads,
and the default executor's size caps nothing.

Close it with `await client.aclose()` (or `async with AsyncClient(...)`) to close its
connections; one client may serve several event loops, one after another.
"""

from __future__ import annotations

import builtins
import secrets
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from openblox.client.async_cluster import AsyncCluster
from openblox.client.async_files import AsyncFiles
from openblox.client.async_sandbox import AsyncSandbox
from openblox.client.async_supervised import AsyncExecStream
from openblox.client.errors import (
    AdmissionDenied,
    InvalidArgument,
    SandboxGone,
    SandboxNotReady,
    SandboxTimeout,
)
from openblox.client.readiness import TERMINAL_REASONS, ready_condition, settled
from openblox.client.sync import ADMISSION_PROFILES
from openblox.denials import admission_denial
from openblox.names import GROUP, KIND, VERSION
from openblox.transport import BadRequest, Conflict, Forbidden, Invalid, Session

__all__ = ["AsyncClient", "AsyncExecStream", "AsyncFiles", "AsyncSandbox"]


class AsyncClient:
    """A connection to one cluster for asyncio callers; cheap to keep.

    Credentials are found in the transport's one order (`openblox.transport.credentials`),
    as for `Client`; the namespace defaults to the one of the same source.
    """

    def __init__(
        self,
        namespace: str | None = None,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
    ) -> None:
        self._cluster = AsyncCluster(Session.discover(kubeconfig, context))
        self.namespace = namespace or self._cluster.session.namespace

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close this loop's connections (a later call opens new ones)."""
        await self._cluster.aclose()

    async def create(
        self,
        profile: str,
        name: str | None = None,
        namespace: str | None = None,
        *,
        idle_timeout_seconds: int | None = None,
        max_age_seconds: int | None = None,
        timeout: float = 120.0,
    ) -> AsyncSandbox:
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
            created: Mapping[str, Any] = await self._cluster.create_sandbox(body)
        except Conflict as error:
            existing = await self._cluster.read_sandbox(namespace, name)
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
        ready = await self._wait_ready(namespace, name, created, timeout)
        return AsyncSandbox(self._cluster, ready)

    async def _wait_ready(
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
            async for current in self._cluster.sandbox_changes(
                namespace, name, resource_version, remaining
            ):
                if settled(current):
                    break

    async def get(self, name: str, namespace: str | None = None) -> AsyncSandbox:
        namespace = namespace or self.namespace
        body = await self._cluster.read_sandbox(namespace, name)
        if body is None:
            raise SandboxGone(f"sandbox {namespace}/{name} does not exist")
        return AsyncSandbox(self._cluster, body)

    async def list(self, namespace: str | None = None) -> builtins.list[AsyncSandbox]:
        items = await self._cluster.list_sandboxes(namespace or self.namespace)
        return [AsyncSandbox(self._cluster, item) for item in items]

    async def delete(self, name: str, namespace: str | None = None) -> None:
        await self._cluster.delete_sandbox(namespace or self.namespace, name)

    async def profiles(self) -> builtins.list[str]:
        """Profiles the admission policy will accept (read from the operator's published list)."""
        return sorted((await self._cluster.read_config_map(ADMISSION_PROFILES)).keys())
