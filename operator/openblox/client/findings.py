"""What an exec's outcome means, as plans: the policies it ran into, and why a stream that
ended without the supervisor's verdict broke (`postmortem` reads what the API server shows).

What it learns of the pod once (its sizes, whether its scratch is noexec) it keeps for the
handle's lifetime.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, NoReturn, Protocol

from openblox.client.cluster import read_pod, read_sandbox, recorded_denials
from openblox.client.effects import Plan, Sleep, Unreachable
from openblox.client.errors import ExecTransportError, SandboxGone
from openblox.client.limits import ExecLimits
from openblox.client.postmortem import (
    Fate,
    gone_message,
    latest_denial,
    no_verdict_message,
    pod_fate,
    pod_sizes,
    status_denial,
)
from openblox.client.results import ExecResult
from openblox.denials import Denial, ExecOutcome, Policy, classify_exec, scratch_mounted_noexec
from openblox.transport.errors import ApiError

# After an exec breaks without a verdict, how long to wait for the kubelet to report
# whether the pod's container ended (and why: OOMKilled is a memory denial).
POD_END_WAIT_SECONDS = 8.0


class Subject(Protocol):
    """The Sandbox whose outcomes are read (`sandbox_steps.SandboxSteps`)."""

    body: Mapping[str, Any]
    name: str
    namespace: str
    profile: str

    @property
    def pod(self) -> str: ...

    @property
    def exec_limits(self) -> ExecLimits: ...

    def helper(
        self, operation: str, *args: str, stdin: bytes | None = ..., output_limit: int | None = ...
    ) -> Plan[ExecResult]: ...


class Findings:
    """The meaning of one Sandbox's exec outcomes."""

    def __init__(self, sandbox: Subject) -> None:
        self._sandbox = sandbox
        self._sizes: tuple[str | None, str | None] | None = None
        self._noexec: bool | None = None

    def last_denial(self) -> Plan[Denial | None]:
        """The latest denial the operator recorded as an Event on this Sandbox.

        Events outlive the Sandbox (an hour by default), so a caller whose sandbox was
        reaped still learns why. None if there is none or Events cannot be read.
        """
        sandbox = self._sandbox
        uid = sandbox.body["metadata"].get("uid")
        if not uid:
            return None
        try:
            return latest_denial((yield from recorded_denials(sandbox.namespace, uid)))
        except ApiError:
            return None

    def result(self, outcome: ExecOutcome, duration: float) -> Plan[ExecResult]:
        """The ExecResult, with the policies the command ran into (docs/denials.md)."""
        sandbox = self._sandbox
        now = datetime.now(UTC)
        policy = Policy(profile=sandbox.profile, processes=sandbox.exec_limits.processes)
        if outcome.may_be_refused_exec():
            # Only for a refusal does it matter whether the scratch mounts are noexec
            # (they are where the node runs the NRI plugin); read once per Sandbox.
            noexec = yield from self._scratch_noexec(policy.writable)
            policy = replace(policy, scratch_noexec=noexec)
        denials = classify_exec(outcome, policy, now)
        if any(d.denied in ("memory", "disk") for d in denials):
            # Name the limit in the record: one read of the pod, only when it matters.
            policy = yield from self._sized_policy(policy)
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

    def _scratch_noexec(self, writable: Sequence[str]) -> Plan[bool]:
        if self._noexec is None:
            mounts = yield from self._sandbox.helper(
                "read", "/proc/self/mounts", output_limit=1 << 20
            )
            if mounts.exit_code != 0:
                return False  # unknown: an exec refusal there is then not called a policy
            self._noexec = scratch_mounted_noexec(mounts.stdout.decode(errors="replace"), writable)
        return self._noexec

    def _sized_policy(self, policy: Policy) -> Plan[Policy]:
        if self._sizes is None:
            try:
                pod = yield from read_pod(self._sandbox.namespace, self._sandbox.pod)
            except ApiError:  # the sizes only name the limit; the denial stands without
                return policy
            self._sizes = pod_sizes(pod or {})
        memory, scratch = self._sizes
        return replace(policy, memory=memory, scratch=scratch)

    def explain_broken(
        self, status: bytes, diagnostics: bytearray, since: datetime
    ) -> Plan[NoReturn]:
        """The exec ended without the supervisor's verdict: the pod died, or the stream broke.

        Waits a few seconds for the kubelet to report how the pod ended (`postmortem`):
        OOMKilled is a memory denial, raised with its record. If the operator already
        replaced the pod, the record is read from the Sandbox's status, where it put it.
        """
        sandbox = self._sandbox
        deadline = time.monotonic() + POD_END_WAIT_SECONDS
        while True:
            try:
                pod = yield from read_pod(sandbox.namespace, sandbox.pod, unreachable=True)
            except Unreachable as error:
                # The API server is unreachable as well: the stream broke, and there is
                # no telling what the command did. Never a result made of half the output.
                raise ExecTransportError(
                    "the exec stream broke and the API server cannot be reached to learn "
                    f"why: {error.detail}"
                ) from error.__cause__
            fate = pod_fate(pod, since=since, profile=sandbox.profile, now=datetime.now(UTC))
            if fate.fate is Fate.ENDED:
                self._raise_gone(fate.denial)
            if fate.fate is Fate.REPLACED:
                body = yield from read_sandbox(sandbox.namespace, sandbox.name)
                record = status_denial(body, since)
                if record is not None or time.monotonic() >= deadline:
                    self._raise_gone(record)
            elif time.monotonic() >= deadline:
                raise ExecTransportError(no_verdict_message(status, diagnostics))
            yield Sleep(0.25)

    def _raise_gone(self, record: Denial | None) -> NoReturn:
        sandbox = self._sandbox
        raise SandboxGone(gone_message(sandbox.namespace, sandbox.name, record), record)
