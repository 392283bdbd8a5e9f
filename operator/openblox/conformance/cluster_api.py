"""The suite's own, small view of the Kubernetes API: namespaces, pods, raw exec, impersonation.

The suite talks to the API server as whoever runs it (a kubeconfig, or the Job's
ServiceAccount) and, for the control-plane tier, as a second identity through
impersonation. Every request goes through the project's one transport
(`openblox.transport`: plain JSON in and out, its typed errors); raw exec here is plain
`pods/exec` with no supervisor: it is how the suite drives its canaries and how the
bare-runc adapter runs commands.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from openblox.conformance.backend import ExecOutcome
from openblox.names import GROUP
from openblox.timestamps import parse_optional_timestamp
from openblox.transport import (
    Api,
    ApiError,
    ExecOutput,
    ExecSocket,
    ExecStreamError,
    Session,
    is_conflict,
    is_not_found,
    path,
    status_of,
)
from openblox.transport.discovery import standard_credentials_exist
from openblox.transport.errors import status_object

# The embedded cluster's kubeconfig: used when nothing else is configured.
EMBEDDED_KUBECONFIG = Path("/var/lib/openblox/cluster/admin.kubeconfig")
SUITE_LABEL = f"{GROUP}/conformance-run"
PART_OF = {"app.kubernetes.io/part-of": "openblox-conformance"}
RAW_OUTPUT_CAP = 16 << 20


def kubeconfig_path(kubeconfig: str | None) -> str | None:
    """The kubeconfig to use: the one given; None when the transport's standard lookup
    finds credentials (KUBECONFIG, a pod's ServiceAccount, ~/.kube/config); else the
    embedded cluster's admin kubeconfig."""
    if kubeconfig is not None:
        return kubeconfig
    if standard_credentials_exist() or not EMBEDDED_KUBECONFIG.exists():
        return None
    return str(EMBEDDED_KUBECONFIG)


def message_of(error: BaseException) -> str:
    """The API server's message for a refused request, else the exception text."""
    if isinstance(error, ApiError):
        message = status_object(error.body).get("message")
        return f"{error.status}: {message or error.reason}"
    return f"{type(error).__name__}: {error}"


class PodEnded(RuntimeError):
    """A pod reached Failed or Succeeded while it was awaited; the message says why."""

    def __init__(self, message: str, pod: Mapping[str, Any]) -> None:
        super().__init__(message)
        self.pod = pod

    @property
    def rejected_at_admission(self) -> bool:
        """The kubelet refused the pod before any container ran (OutOfcpu, NodePorts...):
        the node was short of something at that moment, not the pod's own fault."""
        status = self.pod.get("status") or {}
        return not status.get("containerStatuses") and str(status.get("message", "")).startswith(
            "Pod was rejected"
        )


class Kube:
    """API access as one identity (``impersonate`` names a user to act as)."""

    def __init__(self, session: Session, *, impersonate: str | None = None) -> None:
        self.session = session
        self.impersonate = impersonate
        self.api = Api(
            session, extra_headers={"Impersonate-User": impersonate} if impersonate else None
        )

    @classmethod
    def connect(cls, kubeconfig: str | None = None) -> Kube:
        return cls(Session.discover(kubeconfig_path(kubeconfig)))

    def as_user(self, user: str) -> Kube:
        return Kube(self.session, impersonate=user)

    # ------------------------------------------------------------------ namespaces

    def create_namespace(self, name: str, run_id: str, labels: Mapping[str, str]) -> None:
        body = {
            "metadata": {
                "name": name,
                "labels": {**PART_OF, SUITE_LABEL: run_id, **labels},
            }
        }
        try:
            self.api.post(path(plural="namespaces"), body)
        except ApiError as error:
            if not is_conflict(error):
                raise

    def delete_namespace(self, name: str) -> None:
        try:
            self.api.request(
                "DELETE",
                path(plural="namespaces", name=name),
                params={"propagationPolicy": "Background"},
            )
        except ApiError as error:
            if not is_not_found(error):
                raise

    def leftover_namespaces(self) -> list[str]:
        items = self.api.get(path(plural="namespaces"), labelSelector=SUITE_LABEL)["items"]
        return [item["metadata"]["name"] for item in items]

    # ------------------------------------------------------------------ pods

    def read_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self.api.get(path(plural="pods", namespace=namespace, name=name))
        except ApiError as error:
            if is_not_found(error):
                return None
            raise

    def delete_pod_now(self, namespace: str, name: str) -> None:
        """Delete a pod with no grace period."""
        self.api.request(
            "DELETE",
            path(plural="pods", namespace=namespace, name=name),
            params={"gracePeriodSeconds": 0},
        )

    def wait_pod(
        self, namespace: str, name: str, timeout: float, *, ready: bool = True
    ) -> dict[str, Any]:
        """The pod once Running (and Ready); raises TimeoutError saying what it was doing."""
        deadline = time.monotonic() + timeout
        pod: dict[str, Any] | None = None
        while time.monotonic() < deadline:
            pod = self.read_pod(namespace, name)
            status = (pod or {}).get("status") or {}
            if status.get("phase") in ("Failed", "Succeeded"):
                raise PodEnded(
                    f"pod {namespace}/{name} ended: {self.explain_pod(namespace, name, pod)}",
                    pod or {},
                )
            if status.get("phase") == "Running" and (not ready or _pod_ready(status)):
                assert pod is not None
                return pod
            time.sleep(0.5)
        raise TimeoutError(
            f"pod {namespace}/{name} not running after {timeout:.0f}s: "
            f"{self.explain_pod(namespace, name, pod)}"
        )

    def explain_pod(self, namespace: str, name: str, pod: Mapping[str, Any] | None = None) -> str:
        """Why a pod is where it is: its phase and reason, each container's state and exit
        code, the last lines of its log, and the pod's Events, oldest first."""
        parts = [_pod_summary(pod)]
        for container in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
            if container.get("restartCount") or (container.get("state") or {}).get("terminated"):
                parts.append(self._log_tail(namespace, name, str(container.get("name"))))
        parts.append(self._events_of(namespace, name))
        return "; ".join(part for part in parts if part)

    def _log_tail(self, namespace: str, name: str, container: str, lines: int = 10) -> str:
        try:
            text = self.api.text(
                path(plural="pods", namespace=namespace, name=name, subresource="log"),
                container=container,
                tailLines=lines,
            )
        except ApiError as error:
            return f"{container} log unavailable ({error.status})"
        text = text.strip()
        return f"{container} log tail: {text[-1500:]!r}" if text else f"{container} logged nothing"

    def _events_of(self, namespace: str, name: str, most: int = 8) -> str:
        try:
            events: list[dict[str, Any]] = self.api.get(
                path(plural="events", namespace=namespace),
                fieldSelector=f"involvedObject.name={name}",
            )["items"]
        except ApiError as error:
            return f"events unavailable ({error.status})"
        return describe_events(events, most)

    def node(self, name: str) -> dict[str, Any] | None:
        try:
            return self.api.get(path(plural="nodes", name=name))
        except ApiError as error:
            if status_of(error) in (403, 404):
                return None
            raise

    # ------------------------------------------------------------------ exec

    def exec_headers(self) -> tuple[str, ...]:
        """What an exec stream sends besides the credentials: who it acts as, if not itself."""
        return (f"Impersonate-User: {self.impersonate}",) if self.impersonate else ()

    def exec(
        self,
        namespace: str,
        pod: str,
        container: str,
        argv: Sequence[str],
        *,
        stdin: bytes | None = None,
        timeout: float = 30.0,
        output_cap: int = RAW_OUTPUT_CAP,
    ) -> ExecOutcome:
        """Plain pods/exec: no supervisor, no tree kill. On timeout the stream is closed
        and whatever the command started keeps running."""
        started = time.monotonic()
        try:
            socket = ExecSocket(
                self.session,
                namespace,
                pod,
                container,
                argv,
                stdin=stdin is not None,
                timeout=min(30.0, timeout),
                headers=self.exec_headers(),
            )
        except ExecStreamError as error:
            return ExecOutcome(
                b"", b"", None, duration=time.monotonic() - started, error=str(error)
            )
        if stdin is not None:
            threading.Thread(target=_send, args=(socket, stdin), daemon=True).start()
        output = ExecOutput(keep_stdout=output_cap, keep_stderr=output_cap)
        timed_out = False
        error_text: str | None = None
        try:
            socket.read_to_end(started + timeout, output)
        except TimeoutError:
            timed_out = True
        except ExecStreamError as error:
            error_text = str(error)
        code = output.exit_code
        if code is None and not timed_out and error_text is None and output.status:
            error_text = f"exec ended with {output.status.decode('utf-8', 'replace')[:300]}"
        return ExecOutcome(
            bytes(output.stdout),
            bytes(output.stderr),
            code,
            timed_out=timed_out,
            truncated=output.truncated,
            duration=time.monotonic() - started,
            error=error_text,
        )


def _send(socket: ExecSocket, data: bytes) -> None:
    with contextlib.suppress(Exception):
        socket.send_stdin(data)
        socket.close_stdin()


def describe_events(events: Sequence[Mapping[str, Any]], most: int = 8) -> str:
    """The last `most` Events, oldest first, each as type, reason, count and message."""
    if not events:
        return "no events"
    described = [
        f"{e.get('type')} {e.get('reason')}"
        + (f" x{e.get('count')}" if (e.get("count") or 1) > 1 else "")
        + f": {(e.get('message') or '').strip()[:300]}"
        for e in sorted(events, key=_event_time)[-most:]
    ]
    return "events: " + " | ".join(described)


def _event_time(event: Mapping[str, Any]) -> str:
    """When an Event last happened (its lastTimestamp, else its eventTime, else when it was
    made), in one format so that the three sort together; "" when it names none."""
    for stamp in (
        event.get("lastTimestamp"),
        event.get("eventTime"),
        (event.get("metadata") or {}).get("creationTimestamp"),
    ):
        moment = parse_optional_timestamp(stamp)
        if moment is not None:
            return moment.isoformat()
    return ""


def _pod_ready(status: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def _pod_summary(pod: Mapping[str, Any] | None) -> str:
    if pod is None:
        return "no such pod"
    status = pod.get("status") or {}
    parts = [str(status.get("phase"))]
    if status.get("reason") or status.get("message"):
        parts.append(f"{status.get('reason') or ''}: {status.get('message') or ''}".strip(": "))
    for condition in status.get("conditions") or []:
        if condition.get("status") != "True" and condition.get("message"):
            parts.append(f"{condition.get('type')}: {condition.get('message')}")
    for container in status.get("containerStatuses") or []:
        state = container.get("state") or {}
        for key in ("waiting", "terminated"):
            if state.get(key):
                detail = state[key]
                code = f" exit code {detail['exitCode']}" if "exitCode" in detail else ""
                parts.append(
                    f"{container.get('name')} {key} {detail.get('reason')}{code} "
                    f"{detail.get('message') or ''}".strip()
                )
    return "; ".join(parts)
