"""Which policies one exec ran into, from what the client saw of it. Pure: no I/O.

Two kinds of signal, kept apart in the record's `inferred` field:

- signals the guest cannot forge: the supervisor's timeout and output-cap verdicts (the
  command's bytes are framed by the supervisor, so the command cannot write a verdict),
  and the client's own deadline. These give `time` and `output`, never inferred.
- evidence the guest wrote: the error text and exit status of the command. Everything
  else (network, filesystem, memory, processes, disk, privilege) is read from it, and is
  marked inferred. A program can print "Network is unreachable" without trying anything.

Rules are written to keep false denials out (docs/denials.md lists what each misses): a
message counts only when the error is one the sandbox's policy causes (ENETUNREACH and
failed name lookups, since the sandbox has no route and no resolver; EROFS and EACCES on
paths outside the writable ones, unless the operation was evidently a read, and EACCES on
a program run from a noexec scratch (refusals.py); EPERM; fork's EAGAIN with a fork in
sight; ENOSPC; SIGKILL without a timeout). Code the output quotes (a traceback's source
lines, a failed assertion's values) is not an error and is not read as one.
"""

from __future__ import annotations

import re
import signal as signals
from collections.abc import Iterator, Sequence
from datetime import datetime

from openblox.denials.evidence import (
    DNS_FAILURE,
    EAGAIN,
    ENOSPC,
    FORK_CONTEXT,
    FORK_REFUSED,
    KILLED,
    MEMORY_ERROR,
    PRIVILEGE_WORDS,
    UNREACHABLE,
    address_in,
    host_name_in,
    privileged_operation,
    traceback_context,
)
from openblox.denials.files import path_in, working_directory
from openblox.denials.outcome import ExecOutcome, Found, Policy, Reading
from openblox.denials.outcome import lines as outcome_lines
from openblox.denials.record import Denial
from openblox.denials.refusals import SIGNALS as REFUSAL_SIGNALS
from openblox.denials.refusals import perl_status, privilege_because, refusal
from openblox.names import WORKSPACE_DIR

MAX_DENIALS = 10
# Lines that report an error are read closely (their traceback, the argv); the last this
# many of them, so a flood of error lines costs a bounded amount.
MAX_SIGNAL_LINES = 64
# A source line Python prints under a traceback frame, and the carets under it.
_FRAME = re.compile(r'^\s*File "[^"]*", line \d+')
_CARETS = re.compile(r"^\s*[~^]+\s*$")
# A failed assertion quotes the values it compared, which may be any text.
_ASSERTION = re.compile(r"^(?:E\s+)?(?:(?:\w+\.)*AssertionError\b|assert\b)")


_SIGNALS = (
    UNREACHABLE,
    DNS_FAILURE,
    ENOSPC,
    FORK_REFUSED,
    EAGAIN,
    MEMORY_ERROR,
    PRIVILEGE_WORDS,
    *REFUSAL_SIGNALS,
)


def _quotes_code(lines: Sequence[str], index: int) -> bool:
    line = lines[index]
    if _CARETS.match(line) or _ASSERTION.match(line):
        return True
    return index > 0 and _FRAME.match(lines[index - 1]) is not None and line.startswith("  ")


def _scan_line(reading: Reading, index: int) -> Iterator[Found]:
    lines, policy, argv_text = reading.lines, reading.policy, reading.argv_text
    line = lines[index]

    # Network: (evidence, where the target is named, attempted, when unnamed, because).
    network = (
        (UNREACHABLE, address_in, "{}", "an outbound connection", f"egress={policy.egress}"),
        (
            DNS_FAILURE,
            host_name_in,
            "dns:{}",
            "a DNS lookup",
            f"egress={policy.egress} (no resolver)",
        ),
    )
    for pattern, find, attempted, unnamed, because in network:
        if pattern.search(line):
            target = find([line, traceback_context(lines, index), argv_text])
            yield Found(
                "network",
                attempted.format(target) if target else unnamed,
                because,
                line,
                specific=target is not None,
            )
            return
    if ENOSPC.search(line):
        path = path_in(line, reading.cwd)
        scratch = f"scratch={policy.scratch}" if policy.scratch else "scratch size"
        yield Found(
            "disk",
            f"write {path}" if path else "write past the scratch size",
            f"{scratch} per writable volume ({','.join(policy.writable)})",
            line,
            specific=path is not None,
        )
        return
    if FORK_REFUSED.search(line) or (
        EAGAIN.search(line)
        and (FORK_CONTEXT.search(traceback_context(lines, index)) or FORK_CONTEXT.search(argv_text))
    ):
        what = "start a thread" if "thread" in line else "start a process"
        cap = f"processes={policy.processes}" if policy.processes else "process limit"
        yield Found("processes", what, cap, line)
        return
    if MEMORY_ERROR.search(line):
        size = re.search(r"allocate (\d[\d.]* ?[KMGTP]i?B)", line)
        memory = f"memory={policy.memory}" if policy.memory else "memory limit"
        yield Found(
            "memory",
            f"allocate {size[1]}" if size else "allocate memory",
            memory,
            line,
        )
        return
    if PRIVILEGE_WORDS.search(line):
        what = privileged_operation([line, traceback_context(lines, index)])
        yield Found("privilege", what, privilege_because(policy), line)
        return
    yield from refusal(reading, index)


def _reading(outcome: ExecOutcome, policy: Policy) -> Reading:
    argv = outcome.bounded_argv()
    argv_text = outcome.argv_text()
    return Reading(
        outcome=outcome,
        policy=policy,
        lines=tuple(outcome_lines(outcome)),
        cwd=working_directory(argv, outcome.cwd or WORKSPACE_DIR),
        argv=argv,
        argv_text=argv_text,
        argv_operation=privileged_operation([argv_text]),
    )


def _signal_lines(lines: Sequence[str]) -> list[int]:
    """The lines that may report a policy, less those that quote code; the last
    MAX_SIGNAL_LINES of them."""
    found = [
        index
        for index, line in enumerate(lines)
        if any(pattern.search(line) for pattern in _SIGNALS) and not _quotes_code(lines, index)
    ]
    return found[-MAX_SIGNAL_LINES:]


def classify_exec(outcome: ExecOutcome, policy: Policy, now: datetime) -> list[Denial]:
    """Every policy this exec ran into, most certain first; [] for an ordinary failure."""
    found: list[Found] = []
    if outcome.timed_out:
        found.append(
            Found(
                "time",
                f"run longer than {outcome.timeout:g}s",
                f"timeout={outcome.timeout:g}s",
                f"timed_out=true: the command and every process it started were killed at "
                f"{outcome.timeout:g}s",
                inferred=False,
            )
        )
    if outcome.truncated:
        found.append(
            Found(
                "output",
                f"write more than {outcome.output_limit} bytes of output",
                f"outputBytes={outcome.output_limit}",
                f"truncated=true: output past {outcome.output_limit} bytes was dropped",
                inferred=False,
            )
        )
    reading = _reading(outcome, policy)
    for index in _signal_lines(reading.lines):
        found.extend(_scan_line(reading, index))
    found.extend(perl_status(reading))
    if not outcome.timed_out:
        found.extend(_killed(outcome, reading.lines, policy))
    return [_record(item, policy, now) for item in _dedupe(found)][:MAX_DENIALS]


def _killed(outcome: ExecOutcome, lines: Sequence[str], policy: Policy) -> Iterator[Found]:
    """SIGKILL before the timeout: under gVisor, how a process past the memory limit ends
    (the host kills the process's address space, the Sentry kills the task)."""
    memory = f"memory={policy.memory}" if policy.memory else "memory limit"
    if outcome.signal == signals.SIGKILL or (
        outcome.signal is None and outcome.exit_code == 128 + signals.SIGKILL
    ):
        evidence = "the command was killed by SIGKILL (exit 137) before its timeout"
    else:
        shell = next((line for line in lines if KILLED.match(line.strip())), None)
        if shell is None:
            return
        evidence = f"a child process was killed by SIGKILL before the timeout: {shell.strip()}"
    yield Found("memory", "allocate memory", memory, evidence, specific=False)


def _dedupe(found: Sequence[Found]) -> list[Found]:
    """One record per (category, attempted); a vague one only if its category has none
    better."""
    specific = {item.denied for item in found if item.specific}
    result: list[Found] = []
    seen: set[tuple[str, str]] = set()
    for item in found:
        if not item.specific and item.denied in specific:
            continue
        key = (item.denied, item.attempted)
        if key in seen:
            continue
        seen.add(key)
        result.append(item)
    return result


def _record(item: Found, policy: Policy, now: datetime) -> Denial:
    return Denial(
        denied=item.denied,
        attempted=item.attempted,
        because=item.because,
        profile=policy.profile,
        at=now,
        evidence=item.evidence.strip(),
        inferred=item.inferred,
    )
