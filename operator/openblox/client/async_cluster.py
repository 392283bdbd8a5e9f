"""The async client's cluster I/O: the twin of `cluster.Cluster`, as coroutines.

The same requests, over `transport.async_api.AsyncApi` and `transport.async_exec` (aiohttp, on
the caller's event loop: no thread per call), with the same paths and the same errors.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from openblox.client.background import control_accumulator, control_errors, control_output
from openblox.client.cluster import SYSTEM_NAMESPACE, sandboxes_path
from openblox.client.errors import ExecTransportError, SandboxGone
from openblox.client.launch import SUPERVISOR_ARGV
from openblox.client.postmortem import denial_records
from openblox.client.processes import ANSWER_BYTES
from openblox.denials import Denial
from openblox.names import CONTAINER_NAME, Reason
from openblox.transport import ExecStreamError, Gone, NotFound, Session, path
from openblox.transport.async_api import AsyncApi
from openblox.transport.async_exec import AsyncExecSocket


class AsyncCluster:
    """One cluster, as one identity, for coroutines on any one event loop at a time."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.api = AsyncApi(session, user_agent="openblox-client-async")
        # Per pod: False once its image turned out to lack the native supervisor.
        self.native_supervisor: dict[str, bool] = {}

    async def aclose(self) -> None:
        await self.api.aclose()

    # ------------------------------------------------------------------ Sandbox objects

    async def create_sandbox(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self.api.post(sandboxes_path(body["metadata"]["namespace"]), body)

    async def read_sandbox(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return await self.api.get(sandboxes_path(namespace, name))
        except NotFound:
            return None

    async def list_sandboxes(self, namespace: str) -> list[dict[str, Any]]:
        body = await self.api.get(sandboxes_path(namespace))
        items: list[dict[str, Any]] = body.get("items") or []
        return items

    async def delete_sandbox(self, namespace: str, name: str) -> None:
        with contextlib.suppress(NotFound):
            await self.api.delete(sandboxes_path(namespace, name))

    async def touch(self, namespace: str, name: str, annotation: str, stamp: str) -> None:
        patch = {"metadata": {"annotations": {annotation: stamp}}}
        with contextlib.suppress(NotFound):
            await self.api.patch(sandboxes_path(namespace, name), patch)

    async def sandbox_changes(
        self, namespace: str, name: str, resource_version: str | None, seconds: float
    ) -> AsyncIterator[dict[str, Any]]:
        """The Sandbox's bodies as a watch delivers them, for about `seconds`; on a watch
        whose starting point expired (410), the Sandbox as read afresh. A deletion raises."""
        try:
            async for event in self.api.watch(
                sandboxes_path(namespace),
                resource_version=resource_version,
                timeout_seconds=max(1, int(seconds)),
                fieldSelector=f"metadata.name={name}",
            ):
                if event["type"] == "DELETED":
                    raise SandboxGone(f"sandbox {namespace}/{name} was deleted while starting")
                yield event["object"]
        except Gone:
            current = await self.read_sandbox(namespace, name)
            if current is None:
                raise SandboxGone(f"sandbox {namespace}/{name} does not exist") from None
            yield current

    # ------------------------------------------------------------------ pods, Events

    async def read_pod(self, namespace: str, pod: str) -> dict[str, Any] | None:
        try:
            return await self.api.get(path(plural="pods", namespace=namespace, name=pod))
        except NotFound:
            return None

    async def recorded_denials(self, namespace: str, uid: str) -> list[Denial]:
        events = await self.api.get(
            path(plural="events", namespace=namespace),
            fieldSelector=f"involvedObject.uid={uid},reason={Reason.DENIED}",
        )
        return denial_records(events.get("items") or [])

    async def read_config_map(self, name: str, namespace: str = SYSTEM_NAMESPACE) -> dict[str, str]:
        body = await self.api.get(path(plural="configmaps", namespace=namespace, name=name))
        return dict(body.get("data") or {})

    async def read_secret(self, name: str, namespace: str = SYSTEM_NAMESPACE) -> dict[str, str]:
        body = await self.api.get(path(plural="secrets", namespace=namespace, name=name))
        return dict(body.get("data") or {})

    # ------------------------------------------------------------------ exec

    async def open_exec(
        self, namespace: str, pod: str, argv: Sequence[str], *, stdin: bool, timeout: float
    ) -> AsyncExecSocket:
        try:
            return await AsyncExecSocket.open(
                self.api, namespace, pod, CONTAINER_NAME, argv, stdin=stdin, timeout=timeout
            )
        except ExecStreamError as error:
            if error.status_code == 404:
                raise SandboxGone(f"sandbox pod {namespace}/{pod} does not exist") from error
            raise ExecTransportError(str(error), error.status_code) from error

    async def control(
        self,
        namespace: str,
        pod: str,
        args: Sequence[str],
        timeout: float = 30.0,
        *,
        answer: int = ANSWER_BYTES,
    ) -> bytes:
        """One of the supervisor's own modes, run directly: `background.control`'s twin."""
        socket = await self.open_exec(
            namespace, pod, [*SUPERVISOR_ARGV, *args], stdin=False, timeout=timeout
        )
        output = control_accumulator(answer)
        with control_errors(args[0], timeout):
            await socket.read_to_end(time.monotonic() + timeout, output)
        return control_output(args[0], output)
