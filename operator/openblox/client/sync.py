"""`openblox.Client`: create sandboxes from profiles and run code in them, through the API.

Everything goes through the Kubernetes API server: Sandbox objects for lifecycle, and
`pods/exec` for commands and files. Sandbox pods have no network, so nothing here
reaches a pod directly.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import secrets
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from openblox.client.errors import (
    AdmissionDenied,
    ExecTransportError,
    FileOperationError,
    InvalidArgument,
    SandboxGone,
    SandboxNotReady,
    SandboxTimeout,
)
from openblox.client.exec_stream import (
    ERROR,
    STDERR,
    STDOUT,
    Connection,
    ExecSocket,
    exit_code_from_status,
)
from openblox.client.results import ExecResult
from openblox.names import (
    ANNOTATION_LAST_ACTIVITY,
    CONTAINER_NAME,
    GROUP,
    PLURAL,
    VERSION,
)

# Reasons a Sandbox will not get past by waiting: the caller hears at once.
TERMINAL_REASONS = frozenset(
    {
        "ProfileNotFound",
        "ProfileNotAllowed",
        "ProfileInvalid",
        "LifetimeTooLong",
        "SandboxInvalid",
        "RuntimeUnavailable",
        "BoundaryMismatch",
        "PodConflict",
        "Expired",
    }
)
ACTIVITY_DEBOUNCE_SECONDS = 5.0
# Files move through the exec stream, not the command output cap; this bounds memory.
DEFAULT_READ_LIMIT = 256 * 1024 * 1024
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
# How long past the command's own timeout the supervisor may take to report.
EXEC_GRACE_SECONDS = 10.0
_SUPERVISOR = resources.files("openblox.client").joinpath("supervisor.py").read_text()
_FILE_HELPER = resources.files("openblox.client").joinpath("file_helper.py").read_text()


def _load_configuration(kubeconfig: str | None, context: str | None) -> k8s.Configuration:
    configuration = k8s.Configuration()
    try:
        if kubeconfig is None and context is None:
            k8s_config.load_incluster_config(client_configuration=configuration)
            return configuration
    except k8s_config.ConfigException:
        pass
    k8s_config.load_kube_config(
        config_file=kubeconfig, context=context, client_configuration=configuration
    )
    return configuration


def _default_namespace(kubeconfig: str | None, context: str | None) -> str:
    with contextlib.suppress(OSError):
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
    try:
        _, current = k8s_config.list_kube_config_contexts(config_file=kubeconfig)
        if context:
            contexts, _ = k8s_config.list_kube_config_contexts(config_file=kubeconfig)
            current = next(c for c in contexts if c["name"] == context)
        return str(current["context"].get("namespace") or "default")
    except (k8s_config.ConfigException, StopIteration, OSError):
        return "default"


def _ready_condition(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for condition in (body.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return dict(condition)
    return None


def _admission_record(error: ApiException, profile: str) -> dict[str, Any]:
    try:
        message = json.loads(error.body or "{}").get("message") or str(error.reason)
    except ValueError:
        message = str(error.body or error.reason)
    return {
        "denied": "admission",
        "attempted": f"Sandbox profile={profile}",
        "because": message,
        "profile": profile,
        "at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "inferred": False,
    }


class Client:
    """A connection to one cluster; cheap to keep, safe to share between threads."""

    def __init__(
        self,
        namespace: str | None = None,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
    ) -> None:
        self._configuration = _load_configuration(kubeconfig, context)
        self._api = k8s.ApiClient(self._configuration)
        self._custom = k8s.CustomObjectsApi(self._api)
        self._core = k8s.CoreV1Api(self._api)
        self.namespace = namespace or _default_namespace(kubeconfig, context)

    # ------------------------------------------------------------------ lifecycle

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
            "kind": "Sandbox",
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        }
        try:
            created = self._custom.create_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, body
            )
        except ApiException as error:
            if error.status == 409:
                created = self._custom.get_namespaced_custom_object(
                    GROUP, VERSION, namespace, PLURAL, name
                )
                if created["spec"].get("profile") != profile:
                    raise InvalidArgument(
                        f"sandbox {namespace}/{name} exists with profile "
                        f"{created['spec'].get('profile')}, not {profile}"
                    ) from error
            elif error.status in (400, 403, 422):
                record = _admission_record(error, profile)
                raise AdmissionDenied(f"sandbox refused: {record['because']}", record) from error
            else:
                raise
        ready = self._wait_ready(namespace, name, created, timeout)
        return Sandbox(self, ready)

    def _wait_ready(
        self, namespace: str, name: str, body: Mapping[str, Any], timeout: float
    ) -> Mapping[str, Any]:
        deadline = time.monotonic() + timeout
        last_reason: str | None = None
        resource_version = body["metadata"].get("resourceVersion")
        current = body
        while True:
            condition = _ready_condition(current)
            if condition:
                last_reason = condition.get("reason")
                if condition.get("status") == "True":
                    return current
                if last_reason in TERMINAL_REASONS:
                    raise SandboxNotReady(name, str(last_reason), str(condition.get("message")))
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SandboxTimeout(name, timeout, last_reason)
            stream = watch.Watch().stream(
                self._custom.list_namespaced_custom_object,
                GROUP,
                VERSION,
                namespace,
                PLURAL,
                field_selector=f"metadata.name={name}",
                resource_version=resource_version,
                timeout_seconds=max(1, int(remaining)),
                allow_watch_bookmarks=False,
            )
            try:
                for event in stream:
                    if event["type"] == "DELETED":
                        raise SandboxGone(f"sandbox {namespace}/{name} was deleted while starting")
                    current = event["object"]
                    resource_version = current["metadata"]["resourceVersion"]
                    condition = _ready_condition(current)
                    if condition and (
                        condition.get("status") == "True"
                        or condition.get("reason") in TERMINAL_REASONS
                    ):
                        break
            except ApiException as error:
                if error.status != 410:
                    raise
                # The watch's starting point expired: read the object afresh and go on.
                current = self._custom.get_namespaced_custom_object(
                    GROUP, VERSION, namespace, PLURAL, name
                )
                resource_version = current["metadata"]["resourceVersion"]

    def get(self, name: str, namespace: str | None = None) -> Sandbox:
        namespace = namespace or self.namespace
        try:
            body = self._custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name
            )
        except ApiException as error:
            if error.status == 404:
                raise SandboxGone(f"sandbox {namespace}/{name} does not exist") from error
            raise
        return Sandbox(self, body)

    def list(self, namespace: str | None = None) -> builtins.list[Sandbox]:
        items = self._custom.list_namespaced_custom_object(
            GROUP, VERSION, namespace or self.namespace, PLURAL
        )["items"]
        return [Sandbox(self, item) for item in items]

    def delete(self, name: str, namespace: str | None = None) -> None:
        try:
            self._custom.delete_namespaced_custom_object(
                GROUP, VERSION, namespace or self.namespace, PLURAL, name
            )
        except ApiException as error:
            if error.status != 404:
                raise

    def profiles(self) -> builtins.list[str]:
        """Profiles the admission policy will accept (read from the operator's published list)."""
        configmap = self._core.read_namespaced_config_map(
            "openblox-profile-admission", "openblox-system"
        )
        return sorted((configmap.data or {}).keys())

    # ------------------------------------------------------------------ exec plumbing

    def _open_exec(
        self, namespace: str, pod: str, argv: Sequence[str], *, stdin: bool, timeout: float
    ) -> ExecSocket:
        try:
            return ExecSocket(
                Connection.from_configuration(self._configuration),
                namespace,
                pod,
                CONTAINER_NAME,
                argv,
                stdin=stdin,
                timeout=timeout,
            )
        except ExecTransportError as error:
            if error.status_code == 404:
                raise SandboxGone(f"sandbox pod {namespace}/{pod} does not exist") from error
            raise

    def _pod_alive(self, namespace: str, pod: str) -> bool:
        try:
            body = self._core.read_namespaced_pod(pod, namespace)
        except ApiException as error:
            if error.status == 404:
                return False
            raise
        return body.metadata.deletion_timestamp is None

    def _touch(self, namespace: str, name: str) -> None:
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        patch = {"metadata": {"annotations": {ANNOTATION_LAST_ACTIVITY: stamp}}}
        try:
            self._custom.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name, patch
            )
        except ApiException as error:
            if error.status != 404:
                raise


class Sandbox:
    """A handle on one Sandbox: run commands and move files through `pods/exec`."""

    def __init__(self, client: Client, body: Mapping[str, Any]) -> None:
        self._client = client
        self._body = body
        self.name: str = body["metadata"]["name"]
        self.namespace: str = body["metadata"]["namespace"]
        self.profile: str = body["spec"]["profile"]
        self._last_touch = 0.0
        self._touch_lock = threading.Lock()
        self.files = Files(self)

    def __repr__(self) -> str:
        return f"Sandbox({self.namespace}/{self.name}, profile={self.profile})"

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *_: object) -> None:
        self.delete()

    @property
    def status(self) -> Mapping[str, Any]:
        return dict(self._body.get("status") or {})

    @property
    def pod(self) -> str:
        return str(self.status.get("podName") or self.name)

    def refresh(self) -> Sandbox:
        self._body = self._client.get(self.name, self.namespace)._body
        return self

    def delete(self) -> None:
        self._client.delete(self.name, self.namespace)

    def _limits(self) -> tuple[float, int]:
        limits = self.status.get("execLimits") or {}
        return float(limits.get("timeoutSeconds", 60)), int(limits.get("outputBytes", 1 << 20))

    def exec(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        output_limit: int | None = None,
    ) -> ExecResult:
        """Run argv (no shell) and return its exact output, exit code and verdicts.

        The profile's timeout and output cap apply; a call may lower, never raise them.
        On timeout every process the command started is killed, including those that
        left its session.
        """
        if isinstance(argv, str) or not argv:
            raise InvalidArgument(
                "argv must be a non-empty sequence of strings, not a shell string"
            )
        max_timeout, max_output = self._limits()
        if timeout is not None and timeout > max_timeout:
            raise InvalidArgument(f"timeout {timeout}s is above the profile's {max_timeout:.0f}s")
        if output_limit is not None and output_limit > max_output:
            raise InvalidArgument(
                f"output_limit {output_limit} is above the profile's {max_output}"
            )
        data = stdin.encode() if isinstance(stdin, str) else stdin
        config: dict[str, Any] = {
            "timeout": timeout or max_timeout,
            "cap": output_limit or max_output,
            "env": dict(env or {}),
            "cwd": cwd,
        }
        command = ["python3", "-c", _SUPERVISOR, json.dumps(config), "--", *argv]
        return self._run_supervised(command, data, float(config["timeout"]))

    def _run_supervised(
        self, command: Sequence[str], stdin: bytes | None, timeout: float
    ) -> ExecResult:
        self._record_activity()
        started = time.monotonic()
        socket = self._client._open_exec(
            self.namespace, self.pod, command, stdin=stdin is not None, timeout=30
        )
        sender = None
        if stdin is not None:
            sender = threading.Thread(target=_send_all, args=(socket, stdin), daemon=True)
            sender.start()
        decoder = _FrameDecoder()
        diagnostics = bytearray()
        status: bytes = b""
        try:
            for frame in socket.frames(started + timeout + EXEC_GRACE_SECONDS):
                if frame.channel == STDOUT:
                    decoder.feed(frame.data)
                elif frame.channel == STDERR:
                    diagnostics += frame.data
                elif frame.channel == ERROR:
                    status = frame.data
        except TimeoutError:
            return ExecResult(
                bytes(decoder.stdout),
                bytes(decoder.stderr),
                137,
                True,
                False,
                time.monotonic() - started,
            )
        finally:
            socket.close()
        duration = time.monotonic() - started
        if decoder.verdict is None:
            if not self._client._pod_alive(self.namespace, self.pod):
                raise SandboxGone(f"sandbox {self.namespace}/{self.name} went away during the exec")
            code = exit_code_from_status(status) if status else None
            raise ExecTransportError(
                "the exec ended without a result from the sandbox's supervisor "
                f"(exit {code}); stderr: {diagnostics.decode('utf-8', 'replace')[-500:]}"
            )
        verdict = decoder.verdict
        return ExecResult(
            bytes(decoder.stdout),
            bytes(decoder.stderr),
            int(verdict["exit_code"]),
            bool(verdict["timed_out"]),
            bool(verdict["truncated"]),
            duration,
        )

    def _record_activity(self) -> None:
        """Stamp last-activity through the API server (the guest cannot), at most every few s."""
        now = time.monotonic()
        with self._touch_lock:
            if now - self._last_touch < ACTIVITY_DEBOUNCE_SECONDS:
                return
            self._last_touch = now
        self._client._touch(self.namespace, self.name)

    def _helper(
        self,
        operation: str,
        *args: str,
        stdin: bytes | None = None,
        output_limit: int | None = None,
    ) -> ExecResult:
        _, max_output = self._limits()
        config: dict[str, Any] = {
            "timeout": self._limits()[0],
            "cap": output_limit or max_output,
            "env": {},
            "cwd": None,
        }
        command = [
            "python3",
            "-c",
            _SUPERVISOR,
            json.dumps(config),
            "--",
            "python3",
            "-c",
            _FILE_HELPER,
            operation,
            *args,
        ]
        return self._run_supervised(command, stdin, float(config["timeout"]))


def _send_all(socket: ExecSocket, data: bytes) -> None:
    try:
        socket.send_stdin(data)
        socket.close_stdin()
    except Exception:  # the reader reports the broken stream; nothing to add here
        pass


class _FrameDecoder:
    """Splits the supervisor's framed stdout into the command's stdout, stderr and verdict."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.verdict: dict[str, Any] | None = None

    def feed(self, data: bytes) -> None:
        self._buffer += data
        while len(self._buffer) >= 5:
            length = int.from_bytes(self._buffer[1:5], "big")
            if len(self._buffer) < 5 + length:
                return
            tag, payload = self._buffer[0:1], bytes(self._buffer[5 : 5 + length])
            del self._buffer[: 5 + length]
            if tag == b"O":
                self.stdout += payload
            elif tag == b"E":
                self.stderr += payload
            elif tag == b"R":
                self.verdict = json.loads(payload)


class Files:
    """Files inside the sandbox, moved as argv and stdin: no shell, so no quoting to get wrong."""

    def __init__(self, sandbox: Sandbox) -> None:
        self._sandbox = sandbox

    def _check(self, result: ExecResult, path: str) -> ExecResult:
        if result.exit_code != 0:
            raise FileOperationError(path, result.stderr.decode("utf-8", "replace").strip())
        return result

    def write(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        payload = data.encode() if isinstance(data, str) else data
        self._check(self._sandbox._helper("write", path, oct(mode), stdin=payload), path)

    def read(self, path: str, limit: int = DEFAULT_READ_LIMIT) -> bytes:
        """The file's bytes; a file larger than `limit` raises rather than coming back cut."""
        result = self._check(self._sandbox._helper("read", path, output_limit=limit + 1), path)
        if len(result.stdout) > limit:
            raise FileOperationError(path, f"larger than the read limit of {limit} bytes")
        return result.stdout

    def list(self, path: str = "/workspace") -> builtins.list[dict[str, Any]]:
        result = self._check(self._sandbox._helper("list", path), path)
        return [json.loads(line) for line in result.stdout.splitlines() if line]

    def remove(self, path: str) -> None:
        self._check(self._sandbox._helper("remove", path), path)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.list())
