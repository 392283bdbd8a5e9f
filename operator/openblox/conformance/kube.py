"""The suite's own, small view of the Kubernetes API: namespaces, pods, raw exec, impersonation.

The suite talks to the API server as whoever runs it (a kubeconfig, or the Job's
ServiceAccount) and, for the control-plane tier, as a second identity through
impersonation. Raw exec here is plain `pods/exec` with no supervisor: it is how the suite
drives its canaries and how the bare-runc adapter runs commands.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from openblox.conformance.backend import ExecOutcome
from openblox.kubernetes_configuration import kubernetes_configuration
from openblox.names import GROUP
from openblox.transport import ExecOutput, ExecSocket, ExecStreamError, Session
from openblox.transport.discovery import standard_credentials_exist

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


def status_of(error: BaseException) -> int | None:
    return error.status if isinstance(error, ApiException) else None


def message_of(error: BaseException) -> str:
    """The API server's message for a refused request, else the exception text."""
    if isinstance(error, ApiException):
        try:
            message = json.loads(error.body or "{}").get("message")
        except ValueError:
            message = None
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
        self.configuration = kubernetes_configuration(session)
        self.impersonate = impersonate
        self.api = k8s.ApiClient(self.configuration)
        if impersonate:
            self.api.set_default_header("Impersonate-User", impersonate)
        self.core = k8s.CoreV1Api(self.api)
        self.custom = k8s.CustomObjectsApi(self.api)
        self.rbac = k8s.RbacAuthorizationV1Api(self.api)
        self.discovery = k8s.DiscoveryV1Api(self.api)

    @classmethod
    def connect(cls, kubeconfig: str | None = None) -> Kube:
        return cls(Session.discover(kubeconfig_path(kubeconfig)))

    def as_user(self, user: str) -> Kube:
        return Kube(self.session, impersonate=user)

    def plain(self, obj: Any) -> dict[str, Any]:
        result: dict[str, Any] = self.api.sanitize_for_serialization(obj)
        return result

    # ------------------------------------------------------------------ namespaces

    def create_namespace(self, name: str, run_id: str, labels: Mapping[str, str]) -> None:
        body = {
            "metadata": {
                "name": name,
                "labels": {**PART_OF, SUITE_LABEL: run_id, **labels},
            }
        }
        try:
            self.core.create_namespace(body)
        except ApiException as error:
            if error.status != 409:
                raise

    def delete_namespace(self, name: str) -> None:
        try:
            self.core.delete_namespace(name, propagation_policy="Background")
        except ApiException as error:
            if error.status != 404:
                raise

    def leftover_namespaces(self) -> list[str]:
        items = self.core.list_namespace(label_selector=SUITE_LABEL).items
        return [item.metadata.name for item in items]

    # ------------------------------------------------------------------ pods

    def read_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self.plain(self.core.read_namespaced_pod(name, namespace))
        except ApiException as error:
            if error.status == 404:
                return None
            raise

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
            text = self.core.read_namespaced_pod_log(
                name, namespace, container=container, tail_lines=lines
            )
        except ApiException as error:
            return f"{container} log unavailable ({error.status})"
        text = str(text or "").strip()
        return f"{container} log tail: {text[-1500:]!r}" if text else f"{container} logged nothing"

    def _events_of(self, namespace: str, name: str, most: int = 8) -> str:
        try:
            events = self.core.list_namespaced_event(
                namespace, field_selector=f"involvedObject.name={name}"
            ).items
        except ApiException as error:
            return f"events unavailable ({error.status})"
        if not events:
            return "no events"
        events.sort(key=_event_time)
        described = [
            f"{e.type} {e.reason}"
            + (f" x{e.count}" if (e.count or 1) > 1 else "")
            + f": {(e.message or '').strip()[:300]}"
            for e in events[-most:]
        ]
        return "events: " + " | ".join(described)

    def node(self, name: str) -> dict[str, Any] | None:
        try:
            return self.plain(self.core.read_node(name))
        except ApiException as error:
            if error.status in (403, 404):
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


def _event_time(event: Any) -> str:
    moment = event.last_timestamp or event.event_time or event.metadata.creation_timestamp
    return moment.isoformat() if moment else ""


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
