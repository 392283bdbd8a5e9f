"""The client's cluster I/O: Sandbox objects, their pods and Events, and exec streams.

Everything goes through the API server, over the transport (`openblox.transport`), with
the credentials it finds in its one documented order. Sandbox pods have no network, so
nothing here reaches a pod directly. Errors leave as the client's own types.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from openblox.client.errors import ExecTransportError, SandboxGone
from openblox.client.postmortem import denial_records
from openblox.denials import Denial
from openblox.names import CONTAINER_NAME, GROUP, OPERATOR_NAMESPACE, PLURAL, VERSION, Reason
from openblox.transport import (
    Api,
    ExecSocket,
    ExecStreamError,
    Gone,
    NotFound,
    Session,
    path,
)

SYSTEM_NAMESPACE = OPERATOR_NAMESPACE


def sandboxes_path(namespace: str, name: str | None = None) -> str:
    return path(group=GROUP, version=VERSION, plural=PLURAL, namespace=namespace, name=name)


class Cluster:
    """One cluster, as one identity; safe to share between threads."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.api = Api(session, user_agent="openblox-client")
        # Per pod: False once its image turned out to lack the native supervisor.
        self.native_supervisor: dict[str, bool] = {}

    # ------------------------------------------------------------------ Sandbox objects

    def create_sandbox(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """POST the Sandbox; raises the transport's typed error if refused."""
        return self.api.post(sandboxes_path(body["metadata"]["namespace"]), body)

    def read_sandbox(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self.api.get(sandboxes_path(namespace, name))
        except NotFound:
            return None

    def list_sandboxes(self, namespace: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.api.get(sandboxes_path(namespace)).get("items") or []
        return items

    def delete_sandbox(self, namespace: str, name: str) -> None:
        with contextlib.suppress(NotFound):
            self.api.delete(sandboxes_path(namespace, name))

    def touch(self, namespace: str, name: str, annotation: str, stamp: str) -> None:
        patch = {"metadata": {"annotations": {annotation: stamp}}}
        with contextlib.suppress(NotFound):
            self.api.patch(sandboxes_path(namespace, name), patch)

    def sandbox_changes(
        self, namespace: str, name: str, resource_version: str | None, seconds: float
    ) -> Iterator[dict[str, Any]]:
        """The Sandbox's bodies as a watch delivers them, for about `seconds`; on a watch
        whose starting point expired (410), the Sandbox as read afresh. A deletion raises."""
        try:
            for event in self.api.watch(
                sandboxes_path(namespace),
                resource_version=resource_version,
                timeout_seconds=max(1, int(seconds)),
                fieldSelector=f"metadata.name={name}",
            ):
                if event["type"] == "DELETED":
                    raise SandboxGone(f"sandbox {namespace}/{name} was deleted while starting")
                yield event["object"]
        except Gone:
            current = self.read_sandbox(namespace, name)
            if current is None:
                raise SandboxGone(f"sandbox {namespace}/{name} does not exist") from None
            yield current

    # ------------------------------------------------------------------ pods, Events

    def read_pod(self, namespace: str, pod: str) -> dict[str, Any] | None:
        """The pod as the API serves it, or None if it does not exist."""
        try:
            return self.api.get(path(plural="pods", namespace=namespace, name=pod))
        except NotFound:
            return None

    def recorded_denials(self, namespace: str, uid: str) -> list[Denial]:
        """The denial records of the `Denied` Events the operator wrote on the Sandbox `uid`."""
        events = self.api.get(
            path(plural="events", namespace=namespace),
            fieldSelector=f"involvedObject.uid={uid},reason={Reason.DENIED}",
        ).get("items")
        return denial_records(events or [])

    def read_config_map(self, name: str, namespace: str = SYSTEM_NAMESPACE) -> dict[str, str]:
        body = self.api.get(path(plural="configmaps", namespace=namespace, name=name))
        return dict(body.get("data") or {})

    def read_secret(self, name: str, namespace: str = SYSTEM_NAMESPACE) -> dict[str, str]:
        body = self.api.get(path(plural="secrets", namespace=namespace, name=name))
        return dict(body.get("data") or {})

    # ------------------------------------------------------------------ exec

    def open_exec(
        self, namespace: str, pod: str, argv: Sequence[str], *, stdin: bool, timeout: float
    ) -> ExecSocket:
        try:
            return ExecSocket(
                self.session, namespace, pod, CONTAINER_NAME, argv, stdin=stdin, timeout=timeout
            )
        except ExecStreamError as error:
            if error.status_code == 404:
                raise SandboxGone(f"sandbox pod {namespace}/{pod} does not exist") from error
            raise ExecTransportError(str(error), error.status_code) from error
