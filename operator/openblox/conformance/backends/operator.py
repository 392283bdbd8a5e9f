"""The openblox operator, driven exactly as a caller would: through ``openblox.Client``.

Sandboxes live in a namespace the suite creates and opts in; the control-plane tier gets
a second opted-in namespace and one that has not opted in.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

from openblox.client import Client, OpenbloxClientError, Sandbox
from openblox.client.cluster import sandboxes_path
from openblox.conformance.backend import (
    BackendError,
    Capability,
    ControlPlane,
    ExecOutcome,
    Files,
    Handle,
    Limits,
)
from openblox.conformance.backends.pod_backend import PodBackend
from openblox.conformance.cluster_api import Kube, kubeconfig_path
from openblox.conformance.settings import Settings
from openblox.models.quantity import parse_quantity
from openblox.names import (
    LABEL_NAMESPACE_OPT_IN,
    NAMESPACE_OPT_IN_VALUE,
    OPERATOR_NAMESPACE,
    PROFILES_CONFIGMAP,
)
from openblox.transport import ApiError, is_not_found


class OperatorBackend(PodBackend):
    name = "operator"
    unsupported: Mapping[Capability, str] = {}

    def __init__(self, kube: Kube, settings: Settings) -> None:
        super().__init__(kube, settings)
        self._client: Client | None = None
        self._namespaces: list[str] = []

    @property
    def client(self) -> Client:
        if self._client is None:
            raise BackendError("setup() was not called")
        return self._client

    def setup(self, run_id: str) -> None:
        prefix = f"obx-conformance-{run_id}"
        opted = {LABEL_NAMESPACE_OPT_IN: NAMESPACE_OPT_IN_VALUE}
        self.namespace = f"{prefix}-sbx"
        other, unopted = f"{prefix}-other", f"{prefix}-unopted"
        for name, labels in ((self.namespace, opted), (other, opted), (unopted, {})):
            self.kube.create_namespace(name, run_id, labels)
            self._namespaces.append(name)
        self._client = Client(
            namespace=self.namespace, kubeconfig=kubeconfig_path(self.settings.kubeconfig)
        )
        self.control_plane = ControlPlane(
            sandbox_namespace=self.namespace,
            other_namespace=other,
            unopted_namespace=unopted,
            operator_namespace=OPERATOR_NAMESPACE,
            profiles_configmap=PROFILES_CONFIGMAP,
            unavailable_profile=self.settings.unavailable_profile,
            create_in=self._create_in,
        )

    def teardown(self) -> None:
        if self.settings.keep:
            return
        for name in self._namespaces:
            with contextlib.suppress(Exception):
                self.kube.delete_namespace(name)

    # ------------------------------------------------------------------ lifecycle

    def _create(
        self, profile: str, idle_timeout_seconds: int | None, max_age_seconds: int | None
    ) -> Handle:
        return self._create_in(
            self.namespace,
            profile,
            idle_timeout_seconds=idle_timeout_seconds,
            max_age_seconds=max_age_seconds,
        )

    def _create_in(
        self,
        namespace: str,
        profile: str,
        *,
        name: str | None = None,
        idle_timeout_seconds: int | None = None,
        max_age_seconds: int | None = None,
    ) -> Handle:
        try:
            sandbox = self.client.create(
                profile,
                name,
                namespace,
                idle_timeout_seconds=idle_timeout_seconds,
                max_age_seconds=max_age_seconds,
                timeout=self.settings.create_timeout,
            )
        except OpenbloxClientError as error:
            leftover = getattr(error, "name", None)
            if leftover:
                with contextlib.suppress(Exception):
                    self.client.delete(leftover, namespace)
            raise BackendError(f"{type(error).__name__}: {error}") from error
        return self._handle(sandbox)

    def _handle(self, sandbox: Sandbox) -> Handle:
        pod = self.kube.read_pod(sandbox.namespace, sandbox.pod) or {}
        return Handle(
            name=sandbox.name,
            profile=sandbox.profile,
            limits=_limits(pod, sandbox.status, self.settings.processes),
            pod=sandbox.pod,
            pod_namespace=sandbox.namespace,
            uid=(pod.get("metadata") or {}).get("uid"),
            native=sandbox,
        )

    def delete(self, handle: Handle) -> None:
        namespace = handle.pod_namespace or self.namespace
        self.client.delete(handle.name, namespace)

    def exists(self, handle: Handle) -> bool:
        try:
            body = self.kube.api.get(
                sandboxes_path(handle.pod_namespace or self.namespace, handle.name)
            )
        except ApiError as error:
            if is_not_found(error):
                return False
            raise
        return not (body.get("metadata") or {}).get("deletionTimestamp")

    def recover(self, handle: Handle, timeout: float) -> Handle:
        """What a caller does when its sandbox stops answering: create it again by name."""
        try:
            sandbox = self.client.create(
                handle.profile, handle.name, handle.pod_namespace, timeout=timeout
            )
        except OpenbloxClientError as error:
            raise BackendError(f"{type(error).__name__}: {error}") from error
        return self._handle(sandbox)

    # ------------------------------------------------------------------ running code

    def _run(
        self, handle: Handle, argv: Sequence[str], stdin: bytes | None, timeout: float
    ) -> ExecOutcome:
        sandbox: Sandbox = handle.native
        allowed = handle.limits.exec_timeout_seconds
        if allowed is not None:
            timeout = min(timeout, allowed)
        try:
            result = sandbox.exec(argv, stdin=stdin, timeout=timeout)
        except OpenbloxClientError as error:
            return ExecOutcome(b"", b"", None, error=f"{type(error).__name__}: {error}")
        return ExecOutcome(
            result.stdout,
            result.stderr,
            result.exit_code,
            timed_out=result.timed_out,
            truncated=result.truncated,
            duration=result.duration,
        )

    def files(self, handle: Handle) -> Files:
        return _Files(handle.native)


class _Files:
    def __init__(self, sandbox: Sandbox) -> None:
        self._sandbox = sandbox

    def write(self, path: str, data: bytes) -> None:
        self._sandbox.files.write(path, data)

    def read(self, path: str) -> bytes:
        return self._sandbox.files.read(path)

    def list(self, path: str) -> Sequence[Mapping[str, Any]]:
        return self._sandbox.files.list(path)


def _limits(pod: Mapping[str, Any], status: Mapping[str, Any], processes: int) -> Limits:
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    limits = (containers[0].get("resources") or {}).get("limits") or {}
    volumes = {v.get("name"): v for v in (pod.get("spec") or {}).get("volumes") or []}
    scratch = ((volumes.get("tmp") or {}).get("emptyDir") or {}).get("sizeLimit")
    exec_limits = status.get("execLimits") or {}

    def quantity(text: Any, scale: int = 1) -> int | None:
        if text is None:
            return None
        return int(parse_quantity(str(text)) * scale)

    return Limits(
        cpu_millis=quantity(limits.get("cpu"), 1000),
        memory_bytes=quantity(limits.get("memory")),
        scratch_bytes=quantity(scratch),
        processes=processes,
        output_bytes=exec_limits.get("outputBytes"),
        exec_timeout_seconds=exec_limits.get("timeoutSeconds"),
    )
