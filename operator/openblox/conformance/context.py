"""What a check gets: the backend, its shared sandbox, the canaries, and ways to probe.

One shared sandbox per target serves every property that does not break what it runs
in; destructive properties get their own through ``own_sandbox``. Everything is made
lazily, on first use, so a run of one property costs only what that property needs.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from openblox.conformance.backend import Backend, BackendError, ExecOutcome, Handle
from openblox.conformance.canaries import Canaries, CanaryError
from openblox.conformance.cluster_api import Kube, message_of
from openblox.conformance.settings import Settings
from openblox.guest import PROBE, source
from openblox.transport import ApiError, path

PROBE_SA = "openblox-conformance-probe"
T = TypeVar("T")


class CannotRun(Exception):
    """The property could not be carried out; it FAILS with this reason."""


@dataclass(frozen=True)
class Verdict:
    passed: bool
    evidence: str


def ok(evidence: str) -> Verdict:
    return Verdict(True, evidence)


def fail(evidence: str) -> Verdict:
    return Verdict(False, evidence)


class Environment:
    """What a whole run shares: the API connection, a run id, the canaries."""

    def __init__(self, kube: Kube, settings: Settings, run_id: str | None = None) -> None:
        self.kube = kube
        self.settings = settings
        self.run_id = run_id or secrets.token_hex(3)
        self.prefix = f"obx-conformance-{self.run_id}"
        self.canary_namespace = f"{self.prefix}-canary"
        self._canaries: Canaries | None = None
        self._canary_error: str | None = None
        self._lock = threading.Lock()
        self.namespaces: list[str] = []

    def namespace(self, suffix: str, labels: dict[str, str] | None = None) -> str:
        name = f"{self.prefix}-{suffix}"
        self.kube.create_namespace(name, self.run_id, labels or {})
        if name not in self.namespaces:
            self.namespaces.append(name)
        return name

    @property
    def started_canaries(self) -> Canaries | None:
        return self._canaries

    def canaries(self, node_name: str | None) -> Canaries:
        with self._lock:
            if self._canaries is not None:
                return self._canaries
            if self._canary_error is not None:
                raise CannotRun(f"canaries did not start: {self._canary_error}")
            node_ip = None
            if node_name:
                node = self.kube.node(node_name) or {}
                node_ip = next(
                    (
                        a["address"]
                        for a in (node.get("status") or {}).get("addresses") or []
                        if a.get("type") == "InternalIP"
                    ),
                    None,
                )
            namespace = self.namespace("canary")
            canaries = Canaries(
                self.kube,
                namespace,
                image=self.settings.image,
                pull_policy=self.settings.pull_policy,
                node_name=node_name,
                node_ip=node_ip,
            )
            try:
                canaries.start()
            except (CanaryError, TimeoutError, RuntimeError) as error:
                self._canary_error = str(error)
                raise CannotRun(f"canaries did not start: {error}") from error
            except Exception as error:
                self._canary_error = message_of(error)
                raise CannotRun(f"canaries did not start: {self._canary_error}") from error
            self._canaries = canaries
            return canaries

    def close(self) -> None:
        if self.settings.keep:
            return
        for name in self.namespaces:
            with contextlib.suppress(Exception):
                self.kube.delete_namespace(name)


class Context:
    """One target (backend + profile) within a run."""

    def __init__(self, environment: Environment, backend: Backend, profile: str) -> None:
        self.environment = environment
        self.backend = backend
        self.profile = profile
        self.kube = environment.kube
        self.settings = environment.settings
        self._shared: Handle | None = None
        self._shared_error: str | None = None
        self._facts: dict[str, Any] | None = None
        self._cache: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._probe_identity: Kube | None = None
        self.owned: list[Handle] = []
        self.grace = 0.0
        """Seconds the current property spent waiting for sandboxes; added to its deadline."""
        self._waiting_since: float | None = None

    # ------------------------------------------------------------------ sandboxes

    def sandbox(self) -> Handle:
        """The shared sandbox, created on first use (a failure is remembered, not retried
        for every property)."""
        with self._lock:
            if self._shared is not None:
                return self._shared
            if self._shared_error is not None:
                raise CannotRun(f"the backend could not create a sandbox: {self._shared_error}")
            try:
                self._shared = self.backend.create(self.profile)
            except Exception as error:
                self._shared_error = (
                    message_of(error) if not isinstance(error, BackendError) else str(error)
                )
                raise CannotRun(
                    f"the backend could not create a sandbox: {self._shared_error}"
                ) from error
            return self._shared

    @contextlib.contextmanager
    def own_sandbox(
        self, *, idle_timeout_seconds: int | None = None, max_age_seconds: int | None = None
    ) -> Iterator[Handle]:
        try:
            handle = self.waiting(
                lambda: self.backend.create(
                    self.profile,
                    idle_timeout_seconds=idle_timeout_seconds,
                    max_age_seconds=max_age_seconds,
                )
            )
        except Exception as error:
            reason = str(error) if isinstance(error, BackendError) else message_of(error)
            raise CannotRun(f"the backend could not create a sandbox: {reason}") from error
        self.owned.append(handle)
        try:
            yield handle
        finally:
            with contextlib.suppress(Exception):
                self.backend.delete(handle)

    def waiting(self, action: Callable[[], T]) -> T:
        """Run action (a create, a recovery) without its wait counting toward the deadline:
        waiting for a sandbox to be ready is not the property hanging."""
        self._waiting_since = time.monotonic()
        try:
            return action()
        finally:
            self.grace += time.monotonic() - self._waiting_since
            self._waiting_since = None

    def extra_time(self) -> float:
        """Seconds the current property has spent waiting for sandboxes, so far."""
        since = self._waiting_since
        return self.grace + (time.monotonic() - since if since is not None else 0.0)

    def close(self) -> None:
        with self._lock:
            handles = [h for h in (self._shared, *self.owned) if h is not None]
            self._shared = None
        for handle in handles:
            with contextlib.suppress(Exception):
                self.backend.delete(handle)

    # ------------------------------------------------------------------ running things

    def exec(
        self,
        argv: Sequence[str],
        *,
        handle: Handle | None = None,
        stdin: bytes | None = None,
        timeout: float = 60,
    ) -> ExecOutcome:
        return self.backend.exec(handle or self.sandbox(), argv, stdin=stdin, timeout=timeout)

    def probe(
        self,
        command: str,
        config: dict[str, Any] | None = None,
        *,
        handle: Handle | None = None,
        timeout: float = 60,
    ) -> dict[str, Any]:
        """Run a probe command inside the sandbox; its JSON verdict, or CannotRun saying why."""
        argv = ["python3", "-c", source(PROBE), command]
        if config is not None:
            argv.append(json.dumps(config))
        outcome = self.exec(argv, handle=handle, timeout=timeout)
        return parse_probe(command, outcome)

    def facts(self) -> dict[str, Any]:
        """What the sandbox sees of itself (read-only; gathered once per target)."""
        if self._facts is None:
            self._facts = self.probe("facts")
        return self._facts

    def cached(self, command: str, config: dict[str, Any] | None = None) -> dict[str, Any]:
        """A probe whose answer does not change during the run, asked once per target."""
        key = command + json.dumps(config, sort_keys=True)
        if key not in self._cache:
            self._cache[key] = self.probe(command, config)
        return self._cache[key]

    def token(self) -> str:
        return f"obx{secrets.token_hex(6)}"

    # ------------------------------------------------------------------ Kubernetes view

    def pod(self, handle: Handle | None = None) -> dict[str, Any] | None:
        handle = handle or self.sandbox()
        if not (handle.pod and handle.pod_namespace):
            return None
        return self.kube.read_pod(handle.pod_namespace, handle.pod)

    def node_name(self) -> str | None:
        pod = self.pod()
        return ((pod or {}).get("spec") or {}).get("nodeName")

    def node(self) -> dict[str, Any] | None:
        name = self.node_name()
        return self.kube.node(name) if name else None

    def canaries(self) -> Canaries:
        return self.environment.canaries(self.node_name())

    def probe_identity(self) -> Kube:
        """A second, unprivileged identity: a ServiceAccount with only the shipped
        ``openblox-client`` role, bound in the backend's sandbox namespace, reached by
        impersonation."""
        if self._probe_identity is not None:
            return self._probe_identity
        plane = self.backend.control_plane
        if plane is None:
            raise CannotRun("the backend exposes no control plane")
        namespace = plane.sandbox_namespace
        api = self.kube.api
        with contextlib.suppress(Exception):
            api.post(
                path(plural="serviceaccounts", namespace=namespace),
                {"metadata": {"name": PROBE_SA}, "automountServiceAccountToken": False},
            )
        for bound_in in (namespace, plane.unopted_namespace):
            body = {
                "metadata": {"name": PROBE_SA, "namespace": bound_in},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "openblox-client",
                },
                "subjects": [{"kind": "ServiceAccount", "name": PROBE_SA, "namespace": namespace}],
            }
            try:
                api.post(
                    path(
                        group="rbac.authorization.k8s.io",
                        plural="rolebindings",
                        namespace=bound_in,
                    ),
                    body,
                )
            except Exception as error:
                if not (isinstance(error, ApiError) and error.status_reason == "AlreadyExists"):
                    raise CannotRun(
                        f"cannot bind openblox-client for the probe identity in {bound_in}: "
                        f"{message_of(error)}"
                    ) from error
        self._probe_identity = self.kube.as_user(f"system:serviceaccount:{namespace}:{PROBE_SA}")
        return self._probe_identity


def parse_probe(command: str, outcome: ExecOutcome) -> dict[str, Any]:
    if outcome.error:
        raise CannotRun(f"probe {command}: the exec broke: {outcome.error}")
    if outcome.timed_out:
        raise CannotRun(f"probe {command} timed out after {outcome.duration:.0f}s")
    lines = outcome.stdout.decode("utf-8", "replace").strip().splitlines()
    try:
        result: dict[str, Any] = json.loads(lines[-1])
    except (ValueError, IndexError) as error:
        raise CannotRun(
            f"probe {command} gave no result (exit {outcome.exit_code}): "
            f"{outcome.stderr.decode('utf-8', 'replace')[-400:]}"
        ) from error
    return result


def volume_medium(ctx: Context, path: str) -> str | None:
    """The emptyDir medium of the pod volume mounted at path: "Memory", "" (node disk),
    None (not an emptyDir), or "?" when the backend shows no pod."""
    pod = ctx.pod()
    if pod is None:
        return "?"
    spec = pod.get("spec") or {}
    mounts = (spec.get("containers") or [{}])[0].get("volumeMounts") or []
    name = next((m["name"] for m in mounts if m.get("mountPath") == path), None)
    volume: dict[str, Any] = next(
        (v for v in spec.get("volumes") or [] if v.get("name") == name), {}
    )
    if "emptyDir" not in volume:
        return None
    return str((volume.get("emptyDir") or {}).get("medium") or "")
