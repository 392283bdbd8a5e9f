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
paths outside the writable ones, unless the operation was evidently a read; EPERM; fork's
EAGAIN with a fork in sight; ENOSPC; SIGKILL without a timeout).
"""

from __future__ import annotations

import re
import signal as signals
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime

from openblox.denials.evidence import (
    DNS_FAILURE,
    EACCES,
    EAGAIN,
    ENOSPC,
    EPERM,
    EROFS,
    FORK_CONTEXT,
    FORK_REFUSED,
    KILLED,
    MEMORY_ERROR,
    PRIVILEGE_WORDS,
    UNKNOWN_OPERATION,
    UNREACHABLE,
    address_in,
    host_name_in,
    is_under,
    path_in,
    privileged_operation,
    traceback_context,
    write_intent,
)
from openblox.denials.record import Category, Denial
from openblox.names import STATE_DIR, TMP_DIR, WORKSPACE_DIR

# Only the end of long output is read: errors come last, and the regexes stay cheap.
SCAN_BYTES = 64 * 1024
MAX_DENIALS = 10


@dataclass(frozen=True, slots=True)
class Policy:
    """What the client knows of the sandbox's policy, for the `because` of each record."""

    profile: str
    egress: str = "none"
    writable: tuple[str, ...] = (TMP_DIR, WORKSPACE_DIR, STATE_DIR)
    scratch_noexec: bool = False
    """Whether the writable places are mounted noexec. Kubernetes has no field for it, so
    it holds only where the node runs openblox's NRI plugin (docs/limits.md); the client
    reads the mounts to know, and an exec refused there is then a policy, not a file mode."""
    memory: str | None = None
    scratch: str | None = None
    processes: int | None = None
    """The profile's process cap (status.execLimits.processes): the exec supervisor sets it
    as RLIMIT_NPROC, so a refused fork names it."""
    user: int | None = 1000


def scratch_mounted_noexec(mounts: str, writable: Sequence[str]) -> bool:
    """Whether every writable place is its own mount with `noexec`, from /proc/self/mounts.

    True only when each is: a place not mounted on its own (so on the root filesystem,
    read-only anyway) or mounted without noexec makes an exec refusal there ordinary.
    """
    options: dict[str, set[str]] = {}
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) >= 4:
            # A later mount on the same point hides the earlier one.
            options[fields[1]] = set(fields[3].split(","))
    return bool(writable) and all("noexec" in options.get(place, set()) for place in writable)


@dataclass(frozen=True, slots=True)
class ExecOutcome:
    """One exec as the client saw it."""

    stdout: bytes
    stderr: bytes
    exit_code: int
    timed_out: bool
    truncated: bool
    timeout: float
    """The timeout this call ran under (the profile's, or lower)."""
    output_limit: int
    signal: int | None = None
    """The signal that ended the command; 0 if it exited; None if nobody said (then an
    exit status of 137 is taken for SIGKILL)."""
    argv: tuple[str, ...] = ()
    cwd: str | None = None

    def may_be_refused_exec(self) -> bool:
        """Whether this could be an exec refused on a noexec scratch mount: only then does
        the client read the sandbox's mounts (once) to set `Policy.scratch_noexec`."""
        return self.exit_code == 126 or b"Permission denied" in self.stderr[-4096:]


# ---------------------------------------------------------------- the outcome's text


def _tail(data: bytes) -> str:
    return data[-SCAN_BYTES:].decode("utf-8", "replace")


def _lines(outcome: ExecOutcome) -> list[str]:
    text = _tail(outcome.stderr)
    if outcome.exit_code != 0 or outcome.timed_out:
        # A failed command may have printed its error to stdout (`2>&1`, pip's log).
        text = _tail(outcome.stdout) + "\n" + text
    return [line.rstrip() for line in text.splitlines() if line.strip()]


# ---------------------------------------------------------------- the classifier


@dataclass(frozen=True, slots=True)
class _Found:
    denied: Category
    attempted: str
    because: str
    evidence: str
    inferred: bool = True
    specific: bool = True


def _privilege_because(policy: Policy) -> str:
    user = f"user={policy.user} " if policy.user is not None else ""
    return f"{user}runAsNonRoot=true capabilities=none noNewPrivileges=true"


def _filesystem_because(policy: Policy) -> str:
    return f"readOnlyRootFilesystem=true writable={','.join(policy.writable)}"


def _scan_line(
    lines: Sequence[str], index: int, outcome: ExecOutcome, policy: Policy, cwd: str
) -> Iterator[_Found]:
    line = lines[index]
    argv_text = " ".join(outcome.argv)

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
            yield _Found(
                "network",
                attempted.format(target) if target else unnamed,
                because,
                line,
                specific=target is not None,
            )
            return
    if ENOSPC.search(line):
        path = path_in(line, cwd)
        scratch = f"scratch={policy.scratch}" if policy.scratch else "scratch size"
        yield _Found(
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
        yield _Found("processes", what, cap, line)
        return
    if MEMORY_ERROR.search(line):
        size = re.search(r"allocate (\d[\d.]* ?[KMGTP]i?B)", line)
        memory = f"memory={policy.memory}" if policy.memory else "memory limit"
        yield _Found(
            "memory",
            f"allocate {size[1]}" if size else "allocate memory",
            memory,
            line,
        )
        return
    if PRIVILEGE_WORDS.search(line):
        what = privileged_operation([line, traceback_context(lines, index)])
        yield _Found("privilege", what, _privilege_because(policy), line)
        return
    erofs = EROFS.search(line)
    eacces = EACCES.search(line)
    eperm = EPERM.search(line)
    if not (erofs or eacces or eperm):
        return
    context = traceback_context(lines, index)
    path = path_in(line, cwd)
    privileged = privileged_operation([line, context, argv_text])
    if path is not None and path.startswith(("/proc/sys", "/sys/")):
        yield _Found(
            "privilege", "change a kernel setting (sysctl)", _privilege_because(policy), line
        )
        return
    if eperm and not erofs and (privileged != UNKNOWN_OPERATION or path is None):
        # EPERM is a missing capability or uid 0: setuid, mount, chown, the clock, ...
        yield _Found("privilege", privileged, _privilege_because(policy), line)
        return
    if path is not None and is_under(path, policy.writable):
        # Inside the writable places a refusal is ordinary (a file's own mode, an exec of
        # a file without +x), unless those places are mounted noexec by policy.
        if eperm:
            yield _Found("privilege", privileged, _privilege_because(policy), line)
        elif eacces and policy.scratch_noexec and _is_exec_refusal(line, outcome):
            yield _Found("filesystem", f"exec {path}", "scratch=noexec", line)
        return
    if path is not None:
        if erofs or write_intent(line, context) is not False:
            yield _Found("filesystem", f"write {path}", _filesystem_because(policy), line)
        return
    if erofs:
        yield _Found(
            "filesystem",
            "write to the root filesystem",
            _filesystem_because(policy),
            line,
            specific=False,
        )
        return
    # A bare "Permission denied" with no path: only a privileged operation's is a policy.
    what = privileged_operation([line])
    if what != UNKNOWN_OPERATION:
        yield _Found("privilege", what, _privilege_because(policy), line)


def _is_exec_refusal(line: str, outcome: ExecOutcome) -> bool:
    return outcome.exit_code == 126 or "exec" in line.lower()


def classify_exec(outcome: ExecOutcome, policy: Policy, now: datetime) -> list[Denial]:
    """Every policy this exec ran into, most certain first; [] for an ordinary failure."""
    found: list[_Found] = []
    if outcome.timed_out:
        found.append(
            _Found(
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
            _Found(
                "output",
                f"write more than {outcome.output_limit} bytes of output",
                f"outputBytes={outcome.output_limit}",
                f"truncated=true: output past {outcome.output_limit} bytes was dropped",
                inferred=False,
            )
        )
    cwd = outcome.cwd or WORKSPACE_DIR
    lines = _lines(outcome)
    for index in range(len(lines)):
        found.extend(_scan_line(lines, index, outcome, policy, cwd))
    if not outcome.timed_out:
        found.extend(_killed(outcome, lines, policy))
    return [_record(item, policy, now) for item in _dedupe(found)][:MAX_DENIALS]


def _killed(outcome: ExecOutcome, lines: Sequence[str], policy: Policy) -> Iterator[_Found]:
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
    yield _Found("memory", "allocate memory", memory, evidence, specific=False)


def _dedupe(found: Sequence[_Found]) -> list[_Found]:
    """One record per (category, attempted); a vague one only if its category has none
    better."""
    specific = {item.denied for item in found if item.specific}
    result: list[_Found] = []
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


def _record(item: _Found, policy: Policy, now: datetime) -> Denial:
    return Denial(
        denied=item.denied,
        attempted=item.attempted,
        because=item.because,
        profile=policy.profile,
        at=now,
        evidence=item.evidence.strip(),
        inferred=item.inferred,
    )
