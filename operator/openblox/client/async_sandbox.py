"""`AsyncSandbox`: the `Sandbox` handle (`handle.py`) for asyncio callers, call for call.

Every wait is a coroutine on the caller's loop (no thread per call). Every decision
between requests is the blocking handle's, from the same pure modules: `limits`,
`launch` and `background` for what to run, `postmortem` for why an exec broke, the
denial classifier for what it ran into. Execs go through `async_cluster`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, NoReturn

import aiohttp

from openblox.client import background, postmortem
from openblox.client.arguments import (
    checked_argv,
    checked_limits,
    checked_port,
    checked_stdin,
    checked_ttl,
)
from openblox.client.async_cluster import AsyncCluster
from openblox.client.async_files import AsyncFiles
from openblox.client.async_supervised import AsyncExecStream, _AsyncSupervisedRun
from openblox.client.errors import (
    ExecTransportError,
    SandboxGone,
    SandboxNotReady,
)
from openblox.client.files import DEFAULT_READ_LIMIT
from openblox.client.handle import ACTIVITY_DEBOUNCE_SECONDS, POD_END_WAIT_SECONDS
from openblox.client.launch import (
    FILE_HELPER_ARGV,
    NATIVE_SUPERVISOR,
    SUPERVISOR_ARGV,
    run_arguments,
)
from openblox.client.limits import ExecLimits
from openblox.client.postmortem import Fate
from openblox.client.preview import (
    CONFIG_MAP,
    DEFAULT_BASE_URL,
    expiry,
    key_ring,
    secret_unreadable,
    signed_url,
)
from openblox.client.processes import (
    ANSWER_BYTES,
    LOG_BYTES,
    Process,
    Processes,
    process_of,
    processes_of,
)
from openblox.client.results import ExecResult
from openblox.denials import Denial, ExecOutcome, Policy, classify_exec, scratch_mounted_noexec
from openblox.names import ANNOTATION_LAST_ACTIVITY, Reason
from openblox.preview.keys import SECRET_NAME
from openblox.preview.tokens import MAX_TTL_SECONDS, Grant
from openblox.timestamps import format_timestamp
from openblox.transport import ApiError
from openblox.transport.async_exec import AsyncExecSocket


class AsyncSandbox:
    """A handle on one Sandbox: run commands and move files through `pods/exec`."""

    def __init__(self, cluster: AsyncCluster, body: Mapping[str, Any]) -> None:
        self._cluster = cluster
        self._body = body
        self.name: str = body["metadata"]["name"]
        self.namespace: str = body["metadata"]["namespace"]
        self.profile: str = body["spec"]["profile"]
        self._last_touch = 0.0
        self._sizes: tuple[str | None, str | None] | None = None
        self._noexec: bool | None = None
        self.files = AsyncFiles(self._helper)

    def __repr__(self) -> str:
        return f"AsyncSandbox({self.namespace}/{self.name}, profile={self.profile})"

    async def __aenter__(self) -> AsyncSandbox:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.delete()

    @property
    def status(self) -> Mapping[str, Any]:
        return dict(self._body.get("status") or {})

    @property
    def pod(self) -> str:
        """The pod's name as the operator reported it (`status.podName`), never guessed."""
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

    async def refresh(self) -> AsyncSandbox:
        body = await self._cluster.read_sandbox(self.namespace, self.name)
        if body is None:
            raise SandboxGone(f"sandbox {self.namespace}/{self.name} does not exist")
        self._body = body
        return self

    async def delete(self) -> None:
        await self._cluster.delete_sandbox(self.namespace, self.name)

    async def preview_url(
        self, port: int, *, ttl: float = 3600, base_url: str | None = None
    ) -> str:
        """A signed link, valid `ttl` seconds, to 127.0.0.1:`port` inside this sandbox."""
        port = checked_port(port)
        ttl = checked_ttl(ttl, MAX_TTL_SECONDS)
        try:
            ring = key_ring(await self._cluster.read_secret(SECRET_NAME))
        except ApiError as error:
            raise secret_unreadable(error.status) from error
        if base_url is None:
            try:
                data = await self._cluster.read_config_map(CONFIG_MAP)
            except ApiError:
                data = {}
            base_url = str(data.get("baseURL") or DEFAULT_BASE_URL)
        uid = str(self._body["metadata"]["uid"])
        return signed_url(Grant(self.namespace, self.name, uid, port, expiry(ttl)), ring, base_url)

    # ------------------------------------------------------------------ commands

    async def exec(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        output_limit: int | None = None,
    ) -> ExecResult:
        """Run argv (no shell) and return its exact output, exit code and verdicts."""
        run = await self._start_run(
            argv, stdin=stdin, env=env, cwd=cwd, timeout=timeout, output_limit=output_limit
        )
        return await run.collect()

    async def stream(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        output_limit: int | None = None,
    ) -> AsyncExecStream:
        """Like exec, but hands output over as it arrives: `async for chunk in stream`."""
        return AsyncExecStream(
            await self._start_run(
                argv, stdin=stdin, env=env, cwd=cwd, timeout=timeout, output_limit=output_limit
            )
        )

    async def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        await self.files.write(path, data, mode)

    async def read_file(self, path: str, limit: int = DEFAULT_READ_LIMIT) -> bytes:
        return await self.files.read(path, limit)

    async def _start_run(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | str | None,
        env: Mapping[str, str] | None,
        cwd: str | None,
        timeout: float | None,
        output_limit: int | None,
    ) -> _AsyncSupervisedRun:
        argv = checked_argv(argv)
        limits: ExecLimits = self.exec_limits
        timeout, cap = checked_limits(
            timeout, output_limit, limits.timeout_seconds, limits.output_bytes
        )
        data = checked_stdin(stdin)
        return await self._run_supervised(timeout, cap, argv, stdin=data, env=env, cwd=cwd)

    async def _run_supervised(
        self,
        timeout: float,
        cap: int,
        argv: Sequence[str],
        *,
        stdin: bytes | None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> _AsyncSupervisedRun:
        arguments = run_arguments(timeout, cap, self.exec_limits.processes, argv, env=env, cwd=cwd)
        await self._record_activity()
        started_at = datetime.now(UTC)
        pod = self.pod
        native = self._cluster.native_supervisor.get(pod, True)

        async def open_exec(prefix: Sequence[str]) -> AsyncExecSocket:
            return await self._cluster.open_exec(
                self.namespace, pod, [*prefix, *arguments], stdin=stdin is not None, timeout=30
            )

        async def python_instead() -> AsyncExecSocket:
            # The image has no native supervisor: the command never started, so running
            # it under the Python one (same limits, same verdict) is safe. Remembered.
            self._cluster.native_supervisor[pod] = False
            return await open_exec(SUPERVISOR_ARGV)

        try:
            socket = await open_exec((NATIVE_SUPERVISOR,) if native else SUPERVISOR_ARGV)
        except SandboxGone as error:
            # Reaped, or its pod killed: the operator's `Denied` Event says which policy.
            record = await self._last_denial()
            if record is None:
                raise
            raise SandboxGone(
                f"{error}: denied {record.denied} ({record.because})", record
            ) from error
        return _AsyncSupervisedRun(
            socket,
            make_result=self._result,
            on_broken=self._raise_broken,
            stdin=stdin,
            timeout=timeout,
            cap=cap,
            argv=tuple(argv),
            cwd=cwd,
            fallback=python_instead if native else None,
            started_at=started_at,
        )

    async def _last_denial(self) -> Denial | None:
        uid = self._body["metadata"].get("uid")
        if not uid:
            return None
        try:
            return postmortem.latest_denial(
                await self._cluster.recorded_denials(self.namespace, uid)
            )
        except ApiError:
            return None

    async def _result(self, outcome: ExecOutcome, duration: float) -> ExecResult:
        """The ExecResult, with the policies the command ran into (docs/denials.md)."""
        now = datetime.now(UTC)
        policy = Policy(profile=self.profile, processes=self.exec_limits.processes)
        if outcome.may_be_refused_exec():
            policy = replace(policy, scratch_noexec=await self._scratch_noexec(policy.writable))
        denials = classify_exec(outcome, policy, now)
        if any(d.denied in ("memory", "disk") for d in denials):
            policy = await self._sized_policy(policy)
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

    async def _scratch_noexec(self, writable: Sequence[str]) -> bool:
        if self._noexec is None:
            mounts = await self._helper("read", "/proc/self/mounts", output_limit=1 << 20)
            if mounts.exit_code != 0:
                return False  # unknown: an exec refusal there is then not called a policy
            self._noexec = scratch_mounted_noexec(mounts.stdout.decode(errors="replace"), writable)
        return self._noexec

    async def _sized_policy(self, policy: Policy) -> Policy:
        if self._sizes is None:
            try:
                pod = await self._cluster.read_pod(self.namespace, self.pod) or {}
            except ApiError:
                return policy
            self._sizes = postmortem.pod_sizes(pod)
        memory, scratch = self._sizes
        return replace(policy, memory=memory, scratch=scratch)

    async def _raise_broken(
        self, status: bytes, diagnostics: bytearray, since: datetime
    ) -> NoReturn:
        """The exec ended without the supervisor's verdict (`postmortem` says why)."""
        deadline = time.monotonic() + POD_END_WAIT_SECONDS
        while True:
            try:
                pod = await self._cluster.read_pod(self.namespace, self.pod)
            except (OSError, TimeoutError, aiohttp.ClientError) as error:
                raise ExecTransportError(
                    "the exec stream broke and the API server cannot be reached to learn "
                    f"why: {error!r}"
                ) from error
            fate = postmortem.pod_fate(
                pod, since=since, profile=self.profile, now=datetime.now(UTC)
            )
            if fate.fate is Fate.ENDED:
                self._raise_gone(fate.denial)
            if fate.fate is Fate.REPLACED:
                sandbox = await self._cluster.read_sandbox(self.namespace, self.name)
                record = postmortem.status_denial(sandbox, since)
                if record is not None or time.monotonic() >= deadline:
                    self._raise_gone(record)
            elif time.monotonic() >= deadline:
                raise ExecTransportError(postmortem.no_verdict_message(status, diagnostics))
            await asyncio.sleep(0.25)

    def _raise_gone(self, record: Denial | None) -> NoReturn:
        raise SandboxGone(postmortem.gone_message(self.namespace, self.name, record), record)

    async def _record_activity(self) -> None:
        """Stamp last-activity through the API server (the guest cannot), at most every few s.
        Checked and set with no await between: coroutines on one loop cannot interleave."""
        now = time.monotonic()
        if now - self._last_touch < ACTIVITY_DEBOUNCE_SECONDS:
            return
        self._last_touch = now
        stamp = format_timestamp(datetime.now(UTC))
        await self._cluster.touch(self.namespace, self.name, ANNOTATION_LAST_ACTIVITY, stamp)

    async def _helper(
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
            run = await self._run_supervised(limits.timeout_seconds, cap, argv, stdin=stdin)
            return await run.collect()
        except ExecTransportError:
            # Every file operation is idempotent (files.py): one that lost its stream is
            # safe to run once more; a command's exec is never retried.
            run = await self._run_supervised(limits.timeout_seconds, cap, argv, stdin=stdin)
            return await run.collect()

    # ------------------------------------------------------------------ background commands

    async def start_process(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> Process:
        """Start a detached command under `name`, unless one by that name is running."""
        command = background.start_arguments(
            name, argv, self.exec_limits.processes, env=env, cwd=cwd
        )
        return process_of(await self._control(command), "start")

    async def processes(self) -> Processes:
        return processes_of(await self._control(["ps"]))

    async def stop_process(self, name: str, *, grace: float = 2.0) -> Process:
        args, timeout = background.stop_arguments(name, grace)
        return process_of(await self._control(args, timeout), "stop")

    async def logs(self, name: str, *, stream: str = "stdout", limit: int = LOG_BYTES) -> bytes:
        args, answer = background.logs_arguments(name, stream, limit)
        return await self._control(args, answer=answer)

    async def _control(
        self, args: Sequence[str], timeout: float = 30.0, answer: int = ANSWER_BYTES
    ) -> bytes:
        await self._record_activity()
        return await self._cluster.control(self.namespace, self.pod, args, timeout, answer=answer)
