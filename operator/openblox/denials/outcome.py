"""What the classifier reads (one exec's outcome, the policy the client knows of) and what
one of its rules finds. Pure: no I/O.

The guest writes the outcome's text, so it is hostile and may be huge: only its end is
read, and each line only in part (`lines`), which bounds every rule's work.
"""

from __future__ import annotations

import errno
import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass

from openblox.denials.record import Category
from openblox.names import STATE_DIR, TMP_DIR, WORKSPACE_DIR

# Only the end of long output is read: errors come last, and the regexes stay cheap.
SCAN_BYTES = 64 * 1024
# A longer line is read at its two ends, where a message and the path it names are.
LINE_CHARS = 2048
# How much of the caller's argv is read: it names what the command was asked to do.
ARGV_CHARS = 8192
ARGV_ITEMS = 64
# Whether the mounts matter: the words an exec refused with EACCES is reported in.
_REFUSAL_WORDS = re.compile(
    rb"[Pp]ermission denied|EACCES|os error 13|not set as executable|failed to map segment"
)
_REFUSAL_BYTES = 4096
_PERL_ERRNOS = (errno.EACCES, errno.EROFS)


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
        the client read the sandbox's mounts (once) to set `Policy.scratch_noexec`. Each
        runtime and language words the refusal its own way (`Permission denied`, Go's
        `permission denied`, Node's `EACCES`, Rust's `os error 13`, git's skipped hook,
        the loader's refused mapping)."""
        if self.exit_code == 126 or self.perl_errno() == errno.EACCES:
            return True
        tails = [self.stderr[-_REFUSAL_BYTES:]]
        if self.exit_code != 0:
            tails.append(self.stdout[-_REFUSAL_BYTES:])
        return any(_REFUSAL_WORDS.search(tail) for tail in tails)

    def perl_errno(self) -> int | None:
        """The errno a perl program died of: perl's `die` exits with `$!` as its status
        (perlfunc, die), so 13 is EACCES and 30 EROFS, whatever its message says."""
        is_perl = bool(self.argv) and posixpath.basename(self.argv[0]).startswith("perl")
        return self.exit_code if is_perl and self.exit_code in _PERL_ERRNOS else None

    def bounded_argv(self) -> tuple[str, ...]:
        """The argv as far as the rules read it: its first arguments, each cut short."""
        return tuple(argument[:ARGV_CHARS] for argument in self.argv[:ARGV_ITEMS])

    def argv_text(self) -> str:
        return " ".join(self.bounded_argv())[:ARGV_CHARS]


@dataclass(frozen=True, slots=True)
class Found:
    """What one rule found: a record without the fields every record shares."""

    denied: Category
    attempted: str
    because: str
    evidence: str
    inferred: bool = True
    specific: bool = True


@dataclass(frozen=True, slots=True)
class Reading:
    """One exec as the rules read it: the bounded text, and what is worked out once per
    exec rather than once per line."""

    outcome: ExecOutcome
    policy: Policy
    lines: tuple[str, ...]
    cwd: str
    """Where relative paths in the output start (files.working_directory)."""
    argv: tuple[str, ...]
    """`outcome.bounded_argv()`."""
    argv_text: str
    argv_operation: str
    """The privileged operation the argv names, if any (evidence.privileged_operation)."""


def _tail(data: bytes) -> str:
    return data[-SCAN_BYTES:].decode("utf-8", "replace")


def _bounded(line: str) -> str:
    if len(line) <= LINE_CHARS:
        return line
    half = LINE_CHARS // 2
    return f"{line[:half]} … {line[-half:]}"


def lines(outcome: ExecOutcome) -> list[str]:
    """The text the rules read: the end of stderr, and of stdout when the command failed
    (`2>&1`, pip's log), one entry per non-blank line, each bounded."""
    text = _tail(outcome.stderr)
    if outcome.exit_code != 0 or outcome.timed_out:
        text = _tail(outcome.stdout) + "\n" + text
    return [_bounded(line.rstrip()) for line in text.splitlines() if line.strip()]
