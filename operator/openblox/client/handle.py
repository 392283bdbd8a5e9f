"""`Sandbox`: a handle on one Sandbox, to run commands and move files through `pods/exec`."""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, NoReturn

from openblox.client import background, postmortem
from openblox.client.arguments import (
    checked_argv,
    checked_limits,
    checked_stdin,
)
from openblox.client.cluster import Cluster
from openblox.client.errors import (
    ExecTransportError,
    SandboxGone,
    SandboxNotReady,
)
from openblox.client.files import Files
from openblox.client.launch import (
    FILE_HELPER_ARGV,
    NATIVE_SUPERVISOR,
    SUPERVISOR_ARGV,
    run_arguments,
)
from openblox.client.limits import ExecLimits
from openblox.client.postmortem import Fate
from openblox.client.processes import (
    ANSWER_BYTES,
    LOG_BYTES,
    Process,
    Processes,
    process_of,
    processes_of,
)
from openblox.client.results import ExecResult
from openblox.client.supervised import ExecStream, _SupervisedRun
from openblox.denials import Denial, ExecOutcome, Policy, classify_exec, scratch_mounted_noexec
from openblox.names import ANNOTATION_LAST_ACTIVITY, Reason
from openblox.timestamps import format_timestamp
from openblox.transport import ApiError, ExecSocket

ACTIVITY_DEBOUNCE_SECONDS = 5.0
# After an exec breaks without a verdict, how long to wait for the kubelet to report
# whether the pod's container ended (and why: OOMKilled is a memory denial).
POD_END_WAIT_SECONDS = 8.0


class Sandbox:
    """A handle on one Sandbox: run commands and move files through `pods/exec`."""

    def __init__(self, cluster: Cluster, body: Mapping[str, Any]) -> None:
        self._cluster = cluster
        self._body = body
        self.name: str = body["metadata"]["name"]
        self.namespace: str = body["metadata"]["namespace"]
        self.profile: str = body["spec"]["profile"]
        self._last_touch = 0.0
        self._touch_lock = threading.Lock()
        self._sizes: tuple[str | None, str | None] | None = None
        self._noexec: bool | None = None
        self.files = Files(self._helper)

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
                self.name,
                Reason.POD_NOT_CREATED,
                "the operator has not reported a pod (status.podName)",
            )
        return str(name)

    @property
    def exec_limits(self) -> ExecLimits:
        """The profile's timeout, output cap and process cap, as the operator published them."""
        return ExecLimits.from_status(self.status)

    def refresh(self) -> Sandbox:
        body = self._cluster.read_sandbox(self.namespace, self.name)
        if body is None:
            raise SandboxGone(f"sandbox {self.namespace}/{self.name} does not exist")
        self._body = body
        return self

    def delete(self) -> None:
        self._cluster.delete_sandbox(self.namespace, self.name)

    def preview_url(self, port: int, *, ttl: float = 3600, base_url: str | None = None) -> str:
        """A signed link, valid `ttl` seconds, to 127.0.0.1:`port` inside this sandbox.

        Served by the preview proxy over pods/exec (docs/preview.md). Needs read access to
        the preview key Secret (the openblox-preview-signer Role).
        """
        from openblox.client.preview import preview_url

        uid = str(self._body["metadata"]["uid"])
        return preview_url(
            self._cluster, self.namespace, self.name, uid, port, ttl=ttl, base=base_url
        )

    # ------------------------------------------------------------------ commands

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
        limits = self.exec_limits
        timeout, cap = checked_limits(
            timeout, output_limit, limits.timeout_seconds, limits.output_bytes
        )
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
        arguments = run_arguments(timeout, cap, self.exec_limits.processes, argv, env=env, cwd=cwd)
        self._record_activity()
        started_at = datetime.now(UTC)
        pod = self.pod
        native = self._cluster.native_supervisor.get(pod, True)

        def open_exec(prefix: Sequence[str]) -> ExecSocket:
            return self._cluster.open_exec(
                self.namespace, pod, [*prefix, *arguments], stdin=stdin is not None, timeout=30
            )

        def python_instead() -> ExecSocket:
            # The image has no native supervisor: the command never started, so running
            # it under the Python one (same limits, same verdict) is safe. Remembered.
            self._cluster.native_supervisor[pod] = False
            return open_exec(SUPERVISOR_ARGV)

        try:
            socket = open_exec((NATIVE_SUPERVISOR,) if native else SUPERVISOR_ARGV)
        except SandboxGone as error:
            # Reaped, or its pod killed: the operator's `Denied` Event says which policy.
            record = self._last_denial()
            if record is None:
                raise
            raise SandboxGone(
                f"{error}: denied {record.denied} ({record.because})", record
            ) from error
        return _SupervisedRun(
            socket,
            make_result=self._result,
            on_broken=self._raise_broken,
            stdin=stdin,
            timeout=timeout,
            cap=cap,
            argv=tuple(argv),
            cwd=cwd,
            started_at=started_at,
            fallback=python_instead if native else None,
        )

    def _last_denial(self) -> Denial | None:
        """The latest denial the operator recorded as an Event on this Sandbox.

        Events outlive the Sandbox (an hour by default), so a caller whose sandbox was
        reaped still learns why. None if there is none or Events cannot be read.
        """
        uid = self._body["metadata"].get("uid")
        if not uid:
            return None
        try:
            return postmortem.latest_denial(self._cluster.recorded_denials(self.namespace, uid))
        except ApiError:
            return None

    def _result(self, outcome: ExecOutcome, duration: float) -> ExecResult:
        """The ExecResult, with the policies the command ran into (docs/denials.md)."""
        now = datetime.now(UTC)
        policy = Policy(profile=self.profile, processes=self.exec_limits.processes)
        if outcome.may_be_refused_exec():
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
            tuple(denials),
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
                pod = self._cluster.read_pod(self.namespace, self.pod) or {}
            except ApiError:  # the sizes only name the limit; the denial stands without
                return policy
            self._sizes = postmortem.pod_sizes(pod)
        memory, scratch = self._sizes
        return replace(policy, memory=memory, scratch=scratch)

    def _raise_broken(self, status: bytes, diagnostics: bytearray, since: datetime) -> NoReturn:
        """The exec ended without the supervisor's verdict: the pod died, or the stream broke.

        Waits a few seconds for the kubelet to report how the pod ended (`postmortem`):
        OOMKilled is a memory denial, raised with its record. If the operator already
        replaced the pod, the record is read from the Sandbox's status, where it put it.
        """
        deadline = time.monotonic() + POD_END_WAIT_SECONDS
        while True:
            try:
                pod = self._cluster.read_pod(self.namespace, self.pod)
            except (OSError, http.client.HTTPException) as error:
                # The API server is unreachable as well: the stream broke, and there is
                # no telling what the command did. Never a result made of half the output.
                raise ExecTransportError(
                    "the exec stream broke and the API server cannot be reached to learn "
                    f"why: {error}"
                ) from error
            fate = postmortem.pod_fate(
                pod, since=since, profile=self.profile, now=datetime.now(UTC)
            )
            if fate.fate is Fate.ENDED:
                self._raise_gone(fate.denial)
            if fate.fate is Fate.REPLACED:
                sandbox = self._cluster.read_sandbox(self.namespace, self.name)
                record = postmortem.status_denial(sandbox, since)
                if record is not None or time.monotonic() >= deadline:
                    self._raise_gone(record)
            elif time.monotonic() >= deadline:
                raise ExecTransportError(postmortem.no_verdict_message(status, diagnostics))
            time.sleep(0.25)

    def _raise_gone(self, record: Denial | None) -> NoReturn:
        raise SandboxGone(postmortem.gone_message(self.namespace, self.name, record), record)

    def _record_activity(self) -> None:
        """Stamp last-activity through the API server (the guest cannot), at most every few s."""
        now = time.monotonic()
        with self._touch_lock:
            if now - self._last_touch < ACTIVITY_DEBOUNCE_SECONDS:
                return
            self._last_touch = now
        stamp = format_timestamp(datetime.now(UTC))
        self._cluster.touch(self.namespace, self.name, ANNOTATION_LAST_ACTIVITY, stamp)

    def _helper(
        self,
        operation: str,
        *args: str,
        stdin: bytes | None = None,
        output_limit: int | None = None,
    ) -> ExecResult:
        limits = self.exec_limits
        cap = output_limit or limits.output_bytes
        argv = [*FILE_HELPER_ARGV, operation, *args]
        try:
            return self._run_supervised(limits.timeout_seconds, cap, argv, stdin=stdin).collect()
        except ExecTransportError:
            # Every file operation is idempotent (files.py), so one that lost its stream
            # is safe to run once more; a command's exec is never retried.
            return self._run_supervised(limits.timeout_seconds, cap, argv, stdin=stdin).collect()

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
        command = background.start_arguments(
            name, argv, self.exec_limits.processes, env=env, cwd=cwd
        )
        return process_of(self._control(command), "start")

    def processes(self) -> Processes:
        """Every named background command this sandbox has run, running or ended; `omitted`
        counts what its state directory held besides (planted, or past the answer's bound)."""
        return processes_of(self._control(["ps"]))

    def stop_process(self, name: str, *, grace: float = 2.0) -> Process:
        """SIGTERM the command's whole tree, SIGKILL what is left after `grace` seconds."""
        args, timeout = background.stop_arguments(name, grace)
        return process_of(self._control(args, timeout), "stop")

    def logs(self, name: str, *, stream: str = "stdout", limit: int = LOG_BYTES) -> bytes:
        """The last `limit` bytes a background command wrote to `stream` (at most LOG_BYTES:
        the sandbox keeps no more)."""
        args, answer = background.logs_arguments(name, stream, limit)
        return self._control(args, answer=answer)

    def _control(
        self, args: Sequence[str], timeout: float = 30.0, answer: int = ANSWER_BYTES
    ) -> bytes:
        self._record_activity()
        return background.control(
            self._cluster, self.namespace, self.pod, args, timeout, answer=answer
        )
