"""The baseline: a plain pod under the cluster's default runtime (runc), with no hardening.

What ``kubectl run`` or a ``docker run`` of the same image gives: the image's own user,
the default ServiceAccount token, service links, the default capabilities, a writable
root, no resource limits, no lifetime, and ``kubectl exec`` as the way in (no timeout
that kills anything, no output cap). Its failures are the point: they are what the
sandbox adds.
"""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

from openblox import guest
from openblox.conformance.backend import (
    BackendError,
    Capability,
    ExecOutcome,
    Files,
    Handle,
    Limits,
)
from openblox.conformance.backends.pod_backend import PodBackend
from openblox.conformance.cluster_api import message_of
from openblox.names import CONTAINER_NAME
from openblox.transport import ApiError, path

_FILE_HELPER = guest.source(guest.FILE_HELPER)


class BareRuncBackend(PodBackend):
    name = "bare-runc"
    unsupported: Mapping[Capability, str] = {
        Capability.LIFETIME: (
            "a bare pod has no idle timeout or maximum age: it runs until someone deletes it"
        ),
        Capability.CONTROL_PLANE: (
            "no control plane: whoever may create pods writes the whole pod spec, so image, "
            "runtime class, user and capabilities are whatever the caller asks for"
        ),
    }

    def setup(self, run_id: str) -> None:
        self.namespace = f"obx-conformance-{run_id}-runc"
        self.kube.create_namespace(self.namespace, run_id, {})

    def teardown(self) -> None:
        if not self.settings.keep:
            with contextlib.suppress(Exception):
                self.kube.delete_namespace(self.namespace)

    def _create(
        self, profile: str, idle_timeout_seconds: int | None, max_age_seconds: int | None
    ) -> Handle:
        if idle_timeout_seconds is not None or max_age_seconds is not None:
            raise BackendError(self.unsupported[Capability.LIFETIME])
        name = f"bare-{secrets.token_hex(4)}"
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {
                "containers": [
                    {
                        "name": CONTAINER_NAME,
                        "image": self.settings.image,
                        "imagePullPolicy": self.settings.pull_policy,
                    }
                ],
                "terminationGracePeriodSeconds": 1,
            },
        }
        try:
            self.kube.api.post(path(plural="pods", namespace=self.namespace), body)
            self.kube.wait_pod(self.namespace, name, self.settings.create_timeout)
        except (ApiError, TimeoutError, RuntimeError) as error:
            with contextlib.suppress(Exception):
                self.kube.delete_pod_now(self.namespace, name)
            raise BackendError(message_of(error)) from error
        return Handle(
            name=name,
            profile="(none: a plain pod)",
            limits=Limits(),
            pod=name,
            pod_namespace=self.namespace,
        )

    def _run(
        self, handle: Handle, argv: Sequence[str], stdin: bytes | None, timeout: float
    ) -> ExecOutcome:
        return self.kube.exec(
            self.namespace, handle.name, CONTAINER_NAME, argv, stdin=stdin, timeout=timeout
        )

    def delete(self, handle: Handle) -> None:
        with contextlib.suppress(ApiError):
            self.kube.delete_pod_now(self.namespace, handle.name)

    def exists(self, handle: Handle) -> bool:
        return self.kube.read_pod(self.namespace, handle.name) is not None

    def recover(self, handle: Handle, timeout: float) -> Handle:
        """The kubelet restarts the container (restartPolicy Always); wait for that."""
        try:
            self.kube.wait_pod(self.namespace, handle.name, timeout)
        except (TimeoutError, RuntimeError) as error:
            raise BackendError(str(error)) from error
        return handle

    def files(self, handle: Handle) -> Files:
        return _ExecFiles(self, handle)


class _ExecFiles:
    """The same file helper the openblox client uses, run with a plain exec."""

    def __init__(self, backend: BareRuncBackend, handle: Handle) -> None:
        self._backend, self._handle = backend, handle

    def _run(self, *args: str, stdin: bytes | None = None) -> bytes:
        argv = ["python3", "-c", _FILE_HELPER, *args]
        outcome = self._backend.exec(self._handle, argv, stdin=stdin, timeout=60)
        if outcome.error or outcome.exit_code != 0:
            raise BackendError(
                f"{args[1]}: {outcome.error or outcome.stderr.decode('utf-8', 'replace').strip()}"
            )
        return outcome.stdout

    def write(self, path: str, data: bytes) -> None:
        self._run("write", path, oct(0o644), stdin=data)

    def read(self, path: str) -> bytes:
        return self._run("read", path)

    def list(self, path: str) -> Sequence[Mapping[str, Any]]:
        listing = self._run("list", path).decode()
        return [json.loads(line) for line in listing.splitlines() if line]
