"""What `Sandbox` and `AsyncSandbox` do, once, as plans: run commands and move files through
`pods/exec`, keep named background commands, sign preview links.

The state of one handle lives here too (the body last read, when activity was last
stamped, what was learnt of the pod), so both handles keep it the same way. What an
exec's outcome means (the denials it ran into, why a stream broke) is `findings`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import Any

from openblox.client.arguments import checked_argv, checked_limits, checked_stdin
from openblox.client.background import control, logs_arguments, start_arguments, stop_arguments
from openblox.client.cluster import delete_sandbox, open_exec, read_sandbox, touch
from openblox.client.effects import Plan
from openblox.client.errors import (
    ExecTransportError,
    SandboxGone,
    SandboxNotReady,
    SandboxStalled,
)
from openblox.client.files import DEFAULT_READ_LIMIT, FileSteps
from openblox.client.findings import Findings
from openblox.client.launch import (
    FILE_HELPER_ARGV,
    NATIVE_SUPERVISOR,
    SUPERVISOR_ARGV,
    run_arguments,
)
from openblox.client.limits import ExecLimits
from openblox.client.processes import (
    ANSWER_BYTES,
    LOG_BYTES,
    Process,
    Processes,
    process_of,
    processes_of,
)
from openblox.client.results import ExecResult
from openblox.client.supervised import SupervisedRun, read_supervised
from openblox.names import ANNOTATION_LAST_ACTIVITY, Reason
from openblox.timestamps import format_timestamp

ACTIVITY_DEBOUNCE_SECONDS = 5.0


class SandboxSteps:
    """One Sandbox's calls as plans, and the state its handle keeps between them.

    `supervisors` is shared by every handle of one client: per pod, False once its image
    turned out to lack the native supervisor. `touch_lock` guards the activity stamp's
    debounce (a lock where threads share the handle; none is needed on one event loop).
    """

    def __init__(
        self,
        body: Mapping[str, Any],
        supervisors: dict[str, bool],
        touch_lock: AbstractContextManager[object],
    ) -> None:
        self.body = body
        self.name: str = body["metadata"]["name"]
        self.namespace: str = body["metadata"]["namespace"]
        self.profile: str = body["spec"]["profile"]
        self._supervisors = supervisors
        self._touch_lock = touch_lock
        self._last_touch = 0.0
        self._findings = Findings(self)
        self.files = FileSteps(self.helper)

    @property
    def status(self) -> Mapping[str, Any]:
        return dict(self.body.get("status") or {})

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

    def refresh(self) -> Plan[None]:
        """Read the Sandbox again (its status, its pod)."""
        body = yield from read_sandbox(self.namespace, self.name)
        if body is None:
            raise SandboxGone(f"sandbox {self.namespace}/{self.name} does not exist")
        self.body = body

    def delete(self) -> Plan[None]:
        yield from delete_sandbox(self.namespace, self.name)

    def preview_url(
        self, port: int, *, ttl: float = 3600, base_url: str | None = None
    ) -> Plan[str]:
        """A signed link, valid `ttl` seconds, to 127.0.0.1:`port` inside this sandbox.

        Served by the preview proxy over pods/exec (docs/preview.md). Needs read access to
        the preview key Secret (the openblox-preview-signer Role).
        """
        # Loaded here: signing needs the preview package, which no other call does.
        from openblox.client.preview import preview_url

        uid = str(self.body["metadata"]["uid"])
        return (
            yield from preview_url(self.namespace, self.name, uid, port, ttl=ttl, base=base_url)
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
    ) -> Plan[ExecResult]:
        """Run argv (no shell) and return its exact output, exit code and verdicts.

        The profile's timeout and output cap apply; a call may lower, never raise them.
        On timeout every process the command started is killed, including those that
        left its session.
        """
        return (
            yield from self._command(
                argv, stdin, env=env, cwd=cwd, timeout=timeout, output_limit=output_limit
            )
        )

    def stream(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        output_limit: int | None = None,
    ) -> Plan[ExecResult]:
        """Like exec, but hands output over as it arrives: iterate for OutputChunks.

        After the iteration ends, `.result` holds the exit code and verdicts; its stdout
        and stderr hold only the last 64 KiB of each (kept to classify denials), so a long
        output is never held in memory. The same limits apply.
        """
        return (
            yield from self._command(
                argv, stdin, env=env, cwd=cwd, timeout=timeout, output_limit=output_limit,
                streaming=True,
            )
        )  # fmt: skip

    def _command(
        self,
        argv: Sequence[str],
        stdin: bytes | str | None,
        *,
        env: Mapping[str, str] | None,
        cwd: str | None,
        timeout: float | None,
        output_limit: int | None,
        streaming: bool = False,
    ) -> Plan[ExecResult]:
        argv = checked_argv(argv)
        limits = self.exec_limits
        timeout, cap = checked_limits(
            timeout, output_limit, limits.timeout_seconds, limits.output_bytes
        )
        data = checked_stdin(stdin)
        return (
            yield from self.supervised(
                timeout, cap, argv, data, env=env, cwd=cwd, streaming=streaming
            )
        )

    def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> Plan[None]:
        """`files.write`: the whole file at `path`, made or replaced."""
        yield from self.files.write(path, data, mode)

    def read_file(self, path: str, limit: int = DEFAULT_READ_LIMIT) -> Plan[bytes]:
        """`files.read`: the file's bytes, refused if larger than `limit`."""
        return (yield from self.files.read(path, limit))

    def supervised(
        self,
        timeout: float,
        cap: int,
        argv: Sequence[str],
        stdin: bytes | None,
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        streaming: bool = False,
    ) -> Plan[ExecResult]:
        """Run argv under the supervisor: the native one where the image ships it, else its
        Python twin (remembered per pod), with the same limits and the same verdict."""
        arguments = run_arguments(timeout, cap, self.exec_limits.processes, argv, env=env, cwd=cwd)
        yield from self._record_activity()
        started_at = datetime.now(UTC)
        pod = self.pod
        native = self._supervisors.get(pod, True)

        def under(prefix: Sequence[str]) -> Plan[object]:
            return open_exec(
                self.namespace, pod, [*prefix, *arguments], stdin=stdin is not None, timeout=30
            )

        def python_instead() -> Plan[object]:
            # The image has no native supervisor: the command never started, so running
            # it under the Python one (same limits, same verdict) is safe. Remembered.
            self._supervisors[pod] = False
            return under(SUPERVISOR_ARGV)

        try:
            socket = yield from under((NATIVE_SUPERVISOR,) if native else SUPERVISOR_ARGV)
        except SandboxGone as error:
            # Reaped, or its pod killed: the operator's `Denied` Event says which policy.
            record = yield from self._findings.last_denial()
            if record is None:
                raise
            raise SandboxGone(
                f"{error}: denied {record.denied} ({record.because})", record
            ) from error
        run = SupervisedRun(
            timeout=timeout,
            cap=cap,
            argv=tuple(argv),
            cwd=cwd,
            started_at=started_at,
            streaming=streaming,
        )
        return (
            yield from read_supervised(
                run,
                socket,
                stdin=stdin,
                make_result=self._findings.result,
                on_broken=self._findings.explain_broken,
                fallback=python_instead if native else None,
            )
        )

    def helper(
        self,
        operation: str,
        *args: str,
        stdin: bytes | None = None,
        output_limit: int | None = None,
    ) -> Plan[ExecResult]:
        """One operation of the file helper, under the supervisor with the profile's limits."""
        limits = self.exec_limits
        cap = output_limit or limits.output_bytes
        argv = [*FILE_HELPER_ARGV, operation, *args]
        try:
            return (yield from self.supervised(limits.timeout_seconds, cap, argv, stdin))
        except (ExecTransportError, SandboxStalled):
            # Every file operation is idempotent (files.py), so one that lost its stream,
            # or that gVisor ended after a stall, is safe to run once more; a command's
            # exec is never retried.
            return (yield from self.supervised(limits.timeout_seconds, cap, argv, stdin))

    def _record_activity(self) -> Plan[None]:
        """Stamp last-activity through the API server (the guest cannot), at most every few s."""
        now = time.monotonic()
        with self._touch_lock:
            if now - self._last_touch < ACTIVITY_DEBOUNCE_SECONDS:
                return
            self._last_touch = now
        stamp = format_timestamp(datetime.now(UTC))
        yield from touch(self.namespace, self.name, ANNOTATION_LAST_ACTIVITY, stamp)

    # ------------------------------------------------------------------ background commands

    def start_process(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> Plan[Process]:
        """Start a detached command under `name`, unless one by that name is running.

        Idempotent: while `name` runs, calling again starts nothing and returns the
        running one (`started` is False). Its stdout and stderr are kept (the last
        LOG_BYTES of each) for `logs`. The same syscall filter and process cap apply as
        to exec; the profile's exec timeout does not (the sandbox's lifetime does).
        """
        command = start_arguments(name, argv, self.exec_limits.processes, env=env, cwd=cwd)
        return process_of((yield from self._control(command)), "start")

    def processes(self) -> Plan[Processes]:
        """Every named background command this sandbox has run, running or ended; `omitted`
        counts what its state directory held besides (planted, or past the answer's bound)."""
        return processes_of((yield from self._control(["ps"])))

    def stop_process(self, name: str, *, grace: float = 2.0) -> Plan[Process]:
        """SIGTERM the command's whole tree, SIGKILL what is left after `grace` seconds."""
        args, timeout = stop_arguments(name, grace)
        return process_of((yield from self._control(args, timeout)), "stop")

    def logs(self, name: str, *, stream: str = "stdout", limit: int = LOG_BYTES) -> Plan[bytes]:
        """The last `limit` bytes a background command wrote to `stream` (at most LOG_BYTES:
        the sandbox keeps no more)."""
        args, answer = logs_arguments(name, stream, limit)
        return (yield from self._control(args, answer=answer))

    def _control(
        self, args: Sequence[str], timeout: float = 30.0, answer: int = ANSWER_BYTES
    ) -> Plan[bytes]:
        yield from self._record_activity()
        return (yield from control(self.namespace, self.pod, args, timeout, answer=answer))
