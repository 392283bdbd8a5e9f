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
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NoReturn

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from openblox import guest
from openblox.client.arguments import (
    checked_argv,
    checked_byte_count,
    checked_cwd,
    checked_grace,
    checked_limits,
    checked_stdin,
    env_pairs,
)
from openblox.client.errors import (
    AdmissionDenied,
    ExecTransportError,
    FileOperationError,
    InvalidArgument,
    ProcessNotFound,
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
from openblox.client.processes import LOG_BYTES, Process, check_process_name
from openblox.client.results import ExecResult
from openblox.client.supervised import ExecStream, _SupervisedRun
from openblox.denials import (
    ExecOutcome,
    Policy,
    admission_denial,
    classify_exec,
    pod_denial,
    scratch_mounted_noexec,
)
from openblox.names import (
    ANNOTATION_LAST_ACTIVITY,
    CONTAINER_NAME,
    GROUP,
    PLURAL,
    VERSION,
    Reason,
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
# After an exec breaks without a verdict, how long to wait for the kubelet to report
# whether the pod's container ended (and why: OOMKilled is a memory denial).
POD_END_WAIT_SECONDS = 8.0
_SUPERVISOR = guest.source(guest.SUPERVISOR)
_FILE_HELPER = guest.source(guest.FILE_HELPER)
# -I: no working directory or user site on sys.path, so a file the guest wrote cannot
# stand in for a standard module; -S: no `site`, which costs start-up time.
HELPER_PYTHON = ("python3", "-I", "-S", "-c")
SUPERVISOR_ARGV = (*HELPER_PYTHON, _SUPERVISOR)
# The same `run` in C (guest/supervise.c), where the image ships it: no Python start-up.
NATIVE_SUPERVISOR = "/usr/libexec/openblox/supervise"
# The profile default, for a status written before the operator published the cap.
DEFAULT_PROCESS_CAP = 256


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
    return admission_denial(profile, message, datetime.now(UTC)).to_dict()


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
        # Per pod: False once its image turned out to lack the native supervisor.
        self._native_supervisor: dict[str, bool] = {}

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

    def _read_pod(self, namespace: str, pod: str) -> dict[str, Any] | None:
        """The pod as the API serves it (camelCase), or None if it does not exist."""
        try:
            body = self._core.read_namespaced_pod(pod, namespace)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        result: dict[str, Any] = self._api.sanitize_for_serialization(body)
        return result

    def _last_denial(self, namespace: str, uid: str | None) -> dict[str, Any] | None:
        """The latest denial the operator recorded as an Event on the Sandbox `uid`.

        Events outlive the Sandbox (an hour by default), so a caller whose sandbox was
        reaped still learns why. None if there is none or Events cannot be read.
        """
        if not uid:
            return None
        try:
            events = self._core.list_namespaced_event(
                namespace, field_selector=f"involvedObject.uid={uid},reason={Reason.DENIED}"
            ).items
        except ApiException:
            return None
        records = []
        for event in events:
            try:
                record = json.loads(event.message or "")
            except ValueError:
                continue
            if isinstance(record, dict) and "denied" in record:
                records.append(record)
        return max(records, key=lambda r: str(r.get("at", "")), default=None)

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
        self._sizes: tuple[str | None, str | None] | None = None
        self._noexec: bool | None = None
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
        """The pod's name, as the operator reported it: a warm pod handed out from a pool
        keeps the pool's name, so it is read from `status.podName`, never guessed."""
        name = self.status.get("podName")
        if not name:
            raise SandboxNotReady(
                self.name, "PodNotCreated", "the operator has not reported a pod (status.podName)"
            )
        return str(name)

    def refresh(self) -> Sandbox:
        self._body = self._client.get(self.name, self.namespace)._body
        return self

    def delete(self) -> None:
        self._client.delete(self.name, self.namespace)

    def preview_url(self, port: int, *, ttl: float = 3600, base_url: str | None = None) -> str:
        """A signed link, valid `ttl` seconds, to 127.0.0.1:`port` inside this sandbox.

        Served by the preview proxy over pods/exec (docs/preview.md). Needs read access to
        the preview key Secret (the openblox-preview-signer Role).
        """
        from openblox.client.preview import preview_url

        return preview_url(self, port, ttl=ttl, base=base_url)

    def _limits(self) -> tuple[float, int]:
        limits = self.status.get("execLimits") or {}
        return float(limits.get("timeoutSeconds", 60)), int(limits.get("outputBytes", 1 << 20))

    def _process_cap(self) -> int:
        """The profile's process cap; a status without one gets the default, never none."""
        limits = self.status.get("execLimits") or {}
        return int(limits.get("processes") or DEFAULT_PROCESS_CAP)

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
        return self._start_run(
            argv, stdin=stdin, env=env, cwd=cwd, timeout=timeout, output_limit=output_limit
        ).collect()

    def stream(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        output_limit: int | None = None,
    ) -> ExecStream:
        """Like exec, but hands output over as it arrives: iterate for OutputChunks.

        After the iteration ends, `.result` holds the exit code and verdicts; its stdout
        and stderr hold only the last 64 KiB of each (kept to classify denials), so a long
        output is never held in memory. The same limits apply.
        """
        return ExecStream(
            self._start_run(
                argv, stdin=stdin, env=env, cwd=cwd, timeout=timeout, output_limit=output_limit
            )
        )

    def _start_run(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | str | None,
        env: Mapping[str, str] | None,
        cwd: str | None,
        timeout: float | None,
        output_limit: int | None,
    ) -> _SupervisedRun:
        argv = checked_argv(argv)
        timeout, cap = checked_limits(timeout, output_limit, *self._limits())
        data = checked_stdin(stdin)
        return self._run_supervised(timeout, cap, argv, stdin=data, env=env, cwd=cwd)

    def _run_supervised(
        self,
        timeout: float,
        cap: int,
        argv: Sequence[str],
        *,
        stdin: bytes | None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> _SupervisedRun:
        arguments = [
            "run",
            repr(float(timeout)),
            str(cap),
            str(self._process_cap()),
            checked_cwd(cwd),
            *env_pairs(env),
            "--",
            *argv,
        ]
        self._record_activity()
        started_at = datetime.now(UTC)
        native = self._client._native_supervisor.get(self.pod, True)

        def open_exec(prefix: Sequence[str]) -> ExecSocket:
            return self._client._open_exec(
                self.namespace, self.pod, [*prefix, *arguments], stdin=stdin is not None, timeout=30
            )

        def python_instead() -> ExecSocket:
            # The image has no native supervisor: the command never started, so running
            # it under the Python one (same limits, same verdict) is safe. Remembered.
            self._client._native_supervisor[self.pod] = False
            return open_exec(SUPERVISOR_ARGV)

        try:
            socket = open_exec((NATIVE_SUPERVISOR,) if native else SUPERVISOR_ARGV)
        except SandboxGone as error:
            # Reaped, or its pod killed: the operator's `Denied` Event says which policy.
            record = self._client._last_denial(self.namespace, self._body["metadata"].get("uid"))
            if record is None:
                raise
            raise SandboxGone(
                f"{error}: denied {record['denied']} ({record['because']})", record
            ) from error
        return _SupervisedRun(
            self,
            socket,
            stdin=stdin,
            timeout=timeout,
            cap=cap,
            argv=tuple(argv),
            cwd=cwd,
            started_at=started_at,
            fallback=python_instead if native else None,
        )

    def _result(self, outcome: ExecOutcome, duration: float) -> ExecResult:
        """The ExecResult, with the policies the command ran into (docs/denials.md)."""
        now = datetime.now(UTC)
        policy = Policy(profile=self.profile, processes=self._process_cap())
        if outcome.exit_code == 126 or b"Permission denied" in outcome.stderr[-4096:]:
            # Only for a refusal does it matter whether the scratch mounts are noexec
            # (they are where the node runs the NRI plugin); read once per Sandbox.
            policy = replace(policy, scratch_noexec=self._scratch_noexec(policy.writable))
        denials = classify_exec(outcome, policy, now)
        if any(d.denied in ("memory", "disk") for d in denials):
            # Name the limit in the record: one read of the pod, only when it matters.
            policy = self._sized_policy(policy)
            denials = classify_exec(outcome, policy, now)
        return ExecResult(
            outcome.stdout,
            outcome.stderr,
            outcome.exit_code,
            outcome.timed_out,
            outcome.truncated,
            duration,
            tuple(d.to_dict() for d in denials),
        )

    def _scratch_noexec(self, writable: Sequence[str]) -> bool:
        if self._noexec is None:
            mounts = self._helper("read", "/proc/self/mounts", output_limit=1 << 20)
            if mounts.exit_code != 0:
                return False  # unknown: an exec refusal there is then not called a policy
            self._noexec = scratch_mounted_noexec(mounts.stdout.decode(errors="replace"), writable)
        return self._noexec

    def _sized_policy(self, policy: Policy) -> Policy:
        if self._sizes is None:
            try:
                pod = self._client._read_pod(self.namespace, self.pod) or {}
            except ApiException:
                return policy
            self._sizes = _pod_sizes(pod)
        memory, scratch = self._sizes
        return replace(policy, memory=memory, scratch=scratch)

    def _raise_broken(self, status: bytes, diagnostics: bytearray, since: datetime) -> NoReturn:
        """The exec ended without the supervisor's verdict: the pod died, or the stream broke.

        Waits a few seconds for the kubelet to report how the pod ended: OOMKilled is a
        memory denial, raised with its record. If the operator already replaced the pod,
        the record is read from the Sandbox's status, where the operator put it.
        """
        deadline = time.monotonic() + POD_END_WAIT_SECONDS
        while True:
            try:
                pod = self._client._read_pod(self.namespace, self.pod)
            except (urllib3.exceptions.HTTPError, OSError) as error:
                # The API server is unreachable as well: the stream broke, and there is
                # no telling what the command did. Never a result made of half the output.
                raise ExecTransportError(
                    "the exec stream broke and the API server cannot be reached to learn "
                    f"why: {error}"
                ) from error
            replaced = pod is None or _created_after(pod, since)
            if pod is not None and not replaced:
                pod_status = pod.get("status") or {}
                ended = pod_status.get("phase") in ("Failed", "Succeeded") or any(
                    (entry.get("state") or {}).get("terminated")
                    for entry in pod_status.get("containerStatuses") or []
                )
                if ended:
                    denial = pod_denial(pod, profile=self.profile, now=datetime.now(UTC))
                    self._raise_gone(denial.to_dict() if denial else None)
                replaced = pod["metadata"].get("deletionTimestamp") is not None
            if replaced:
                record = self._status_denial(since)
                if record is not None or time.monotonic() >= deadline:
                    self._raise_gone(record)
            elif time.monotonic() >= deadline:
                code = exit_code_from_status(status) if status else None
                raise ExecTransportError(
                    "the exec ended without a result from the sandbox's supervisor "
                    f"(exit {code}); stderr: {diagnostics.decode('utf-8', 'replace')[-500:]}"
                )
            time.sleep(0.25)

    def _raise_gone(self, record: dict[str, Any] | None) -> NoReturn:
        where = f"sandbox {self.namespace}/{self.name}"
        if record is None:
            raise SandboxGone(f"{where} went away during the exec")
        raise SandboxGone(
            f"{where} was stopped during the exec: denied {record['denied']} "
            f"({record['because']}); its pod is replaced and files in /tmp and /workspace "
            "are lost",
            record,
        )

    def _status_denial(self, since: datetime) -> dict[str, Any] | None:
        """A denial the operator recorded for this Sandbox since `since`, if any."""
        try:
            body = self._client.get(self.name, self.namespace)._body
        except SandboxGone:
            return None
        for record in (body.get("status") or {}).get("denials") or []:
            at = _parse_time(record.get("at"))
            if at is not None and at >= since - timedelta(seconds=2):
                return dict(record)
        return None

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
        timeout, max_output = self._limits()
        argv = [*HELPER_PYTHON, _FILE_HELPER, operation, *args]
        try:
            return self._run_supervised(
                timeout, output_limit or max_output, argv, stdin=stdin
            ).collect()
        except ExecTransportError:
            # Every file operation is idempotent (a whole-file write, a read, a listing,
            # a removal), so one that lost its stream is safe to run once more; a
            # command's exec is never retried.
            return self._run_supervised(
                timeout, output_limit or max_output, argv, stdin=stdin
            ).collect()

    # ------------------------------------------------------------------ background commands

    def start_process(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> Process:
        """Start a detached command under `name`, unless one by that name is running.

        Idempotent: while `name` runs, calling again starts nothing and returns the
        running one (`started` is False). Its stdout and stderr are kept (the last
        LOG_BYTES of each) for `logs`. The same syscall filter and process cap apply as
        to exec; the profile's exec timeout does not (the sandbox's lifetime does).
        """
        check_process_name(name)
        command = [
            "start",
            name,
            str(self._process_cap()),
            checked_cwd(cwd),
            str(LOG_BYTES),
            *env_pairs(env),
            "--",
            *checked_argv(argv),
        ]
        stdout = self._control(command)
        return Process.from_record(json.loads(stdout))

    def processes(self) -> builtins.list[Process]:
        """Every named background command this sandbox has run, running or ended."""
        stdout = self._control(["ps"])
        return [Process.from_record(json.loads(line)) for line in stdout.splitlines() if line]

    def stop_process(self, name: str, *, grace: float = 2.0) -> Process:
        """SIGTERM the command's whole tree, SIGKILL what is left after `grace` seconds."""
        check_process_name(name)
        seconds = checked_grace(grace)
        stdout = self._control(["stop", name, repr(seconds)], timeout=seconds + 30)
        return Process.from_record(json.loads(stdout))

    def logs(self, name: str, *, stream: str = "stdout", limit: int = LOG_BYTES) -> bytes:
        """The last `limit` bytes a background command wrote to `stream`."""
        check_process_name(name)
        if stream not in ("stdout", "stderr"):
            raise InvalidArgument(f"stream must be 'stdout' or 'stderr', not {stream!r}")
        return self._control(["logs", name, stream, str(checked_byte_count("limit", limit))])

    def _control(self, args: Sequence[str], timeout: float = 30.0) -> bytes:
        """Run one of the supervisor's own modes directly (it starts no guest code itself,
        or, for `start`, confines what it starts) and return its stdout."""
        self._record_activity()
        socket = self._client._open_exec(
            self.namespace, self.pod, [*SUPERVISOR_ARGV, *args], stdin=False, timeout=timeout
        )
        stdout, stderr, status = bytearray(), bytearray(), b""
        try:
            for frame in socket.frames(time.monotonic() + timeout):
                if frame.channel == STDOUT:
                    stdout += frame.data
                elif frame.channel == STDERR:
                    stderr += frame.data
                elif frame.channel == ERROR:
                    status = frame.data
        except TimeoutError as error:
            raise ExecTransportError(f"{args[0]} did not answer within {timeout:.0f}s") from error
        finally:
            socket.close()
        code = exit_code_from_status(status) if status else None
        if code != 0:
            message = stderr.decode("utf-8", "replace").strip()
            if code == 3:
                raise ProcessNotFound(message)
            raise ExecTransportError(f"{args[0]} failed (exit {code}): {message[-500:]}")
        return bytes(stdout)


def _parse_time(text: object) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def _created_after(pod: Mapping[str, Any], since: datetime) -> bool:
    """Whether the pod was made after `since`: a replacement for the one the exec ran in."""
    created = _parse_time(pod["metadata"].get("creationTimestamp"))
    return created is not None and created > since


def _pod_sizes(pod: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """The sandbox container's memory limit and the scratch volumes' size, as written."""
    spec = pod.get("spec") or {}
    memory = None
    for container in spec.get("containers") or []:
        if container.get("name") == CONTAINER_NAME:
            memory = ((container.get("resources") or {}).get("limits") or {}).get("memory")
    scratch = None
    for volume in spec.get("volumes") or []:
        if volume.get("name") == "workspace":
            scratch = (volume.get("emptyDir") or {}).get("sizeLimit")
    return (
        str(memory) if memory is not None else None,
        str(scratch) if scratch is not None else None,
    )


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
