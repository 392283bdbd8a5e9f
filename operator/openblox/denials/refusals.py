"""Refusals of the filesystem and of privilege: which policy, if any, a line that reports
one ran into. Pure: no I/O.

- a write outside the writable places (`EROFS`, or `EACCES` unless the text shows a read
  or a program being run), also where a tool says so in its own words and names the
  place, or names a database SQLite could not open or write there;
- a program run from scratch, refused with `EACCES` because the writable places are
  mounted noexec (`Policy.scratch_noexec`), when the text, the exit status or the argv
  shows that running it was what failed;
- `EPERM` on a privileged operation.

Where a message names no path, the path the command's argv or a traceback's source line
names may stand in for it, and only as the text allows: a program handed to a call that
runs it, or the one place outside the writable ones the argv writes to.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Iterator, Sequence

from openblox.denials.evidence import (
    EPERM,
    UNKNOWN_OPERATION,
    privileged_operation,
    traceback_context,
)
from openblox.denials.files import (
    EACCES,
    ENOENT,
    EROFS,
    EXEC_FRAMES,
    EXEC_SHAPE,
    EXEC_WORDS,
    MAP_REFUSED,
    SITE_PACKAGES,
    SQLITE,
    UNWRITABLE,
    argv_paths,
    at_command_position,
    exec_target,
    is_under,
    named_paths,
    path_in,
    raw_path_in,
    resolve,
    sqlite_database,
    write_intent,
)
from openblox.denials.outcome import Found, Policy, Reading

NOEXEC = "scratch=noexec"
_CAUSED_BY = "Caused by:"
_IGNORED_HOOK = re.compile(r"The '(?P<path>[^']+)' hook was ignored because it's not set as")
SIGNALS = (
    *(EROFS, EACCES, EPERM, ENOENT, MAP_REFUSED),
    *(SITE_PACKAGES, UNWRITABLE, SQLITE, _IGNORED_HOOK),
)
"""A line none of these match holds no refusal."""


def privilege_because(policy: Policy) -> str:
    user = f"user={policy.user} " if policy.user is not None else ""
    return f"{user}runAsNonRoot=true capabilities=none noNewPrivileges=true"


def _filesystem_because(policy: Policy) -> str:
    return f"readOnlyRootFilesystem=true writable={','.join(policy.writable)}"


def _write(path: str, policy: Policy, line: str) -> Found:
    return Found("filesystem", f"write {path}", _filesystem_because(policy), line)


def _operation(reading: Reading, line: str, context: str) -> str:
    """The privileged operation the line, its traceback or the argv names (in that order)."""
    what = privileged_operation([line, context])
    return reading.argv_operation if what == UNKNOWN_OPERATION else what


def _subject(lines: Sequence[str], index: int) -> str:
    """What a Rust-style error chain's cause explains (cargo, anyhow): the line before
    `Caused by:`. Empty when the line is not the cause in such a chain."""
    if index >= 2 and lines[index - 1].strip() == _CAUSED_BY:
        return lines[index - 2]
    return ""


def _running(reading: Reading, line: str, subject: str, context: str, raw: str | None) -> bool:
    """Whether the text says the refused operation was running a program: the shell's
    status for it (126), words that say so, a frame of a call that runs one, a shell's
    report of one, or the argv running the named path as its program."""
    # The path itself may hold such a word (/workspace/exec/data.csv): read around it.
    words = f"{line}\n{subject}".replace(raw, " ") if raw else f"{line}\n{subject}"
    return bool(
        reading.outcome.exit_code == 126
        or EXEC_WORDS.search(words)
        or EXEC_FRAMES.search(context)
        or EXEC_SHAPE.match(line)
        or (raw is not None and at_command_position(raw, reading.argv))
    )


def refusal(reading: Reading, index: int) -> Iterator[Found]:
    line = reading.lines[index]
    policy = reading.policy
    erofs = EROFS.search(line)
    eacces = EACCES.search(line)
    eperm = EPERM.search(line)
    if not (erofs or eacces or eperm):
        yield from _own_words(reading, index)
        return
    context = traceback_context(reading.lines, index)
    subject = _subject(reading.lines, index)
    raw = raw_path_in(line) or raw_path_in(subject)
    running = _running(reading, line, subject, context, raw)
    if raw is None and eacces:
        raw = exec_target(reading.argv_text, context)
        running = running or raw is not None
    path = resolve(raw, reading.cwd) if raw is not None else None
    # Read only for EPERM, the one refusal it decides: the search is the costliest here.
    privileged = _operation(reading, line, context) if eperm else UNKNOWN_OPERATION
    if path is not None and path.startswith(("/proc/sys", "/sys/")):
        yield Found(
            "privilege", "change a kernel setting (sysctl)", privilege_because(policy), line
        )
        return
    if eperm and not erofs and (privileged != UNKNOWN_OPERATION or path is None):
        # EPERM is a missing capability or uid 0: setuid, mount, chown, the clock, ...
        yield Found("privilege", privileged, privilege_because(policy), line)
        return
    if raw is None or path is None:
        yield from _unnamed(reading, line, erofs=bool(erofs))
    elif is_under(path, policy.writable):
        yield from _in_scratch(
            reading, line, raw, path, running=running, erofs=bool(erofs), privileged=privileged
        )
    else:
        intent = write_intent(line, context, path, reading.argv_text)
        # A program in the image refused for its own mode is not a write.
        if erofs or intent or (intent is None and not running):
            yield _write(path, policy, line)


def _in_scratch(
    reading: Reading,
    line: str,
    raw: str,
    path: str,
    *,
    running: bool,
    erofs: bool,
    privileged: str,
) -> Iterator[Found]:
    """Inside the writable places a refusal is ordinary (a file's own mode, an exec of a
    file without +x), unless those places are mounted noexec by policy."""
    policy = reading.policy
    if EPERM.search(line):
        yield Found("privilege", privileged, privilege_because(policy), line)
    elif erofs and not raw.startswith("/"):
        # The writable places are never read-only: the path is relative to elsewhere.
        yield _write(raw, policy, line)
    elif policy.scratch_noexec and running and not erofs:
        # A bare name was found on PATH: a directory the program put there, in scratch.
        what = f"exec {raw} (found on PATH)" if "/" not in raw else f"exec {path}"
        yield Found("filesystem", what, NOEXEC, line)


def _unnamed(reading: Reading, line: str, *, erofs: bool) -> Iterator[Found]:
    policy = reading.policy
    # The one place outside the writable ones, where the argv writes to it (perl's `$!`
    # names no path).
    places = [
        path
        for path in argv_paths(reading.argv_text)
        if not is_under(path, policy.writable) and (path,) != reading.argv[:1]
    ]
    if len(places) == 1 and write_intent("", "", places[0], reading.argv_text):
        yield _write(places[0], policy, line)
        return
    if erofs:
        yield Found(
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
        yield Found("privilege", what, privilege_because(policy), line)


def _own_words(reading: Reading, index: int) -> Iterator[Found]:
    """A tool that says, without errno text, that it could not write or run something."""
    line = reading.lines[index]
    policy = reading.policy
    cwd = reading.cwd
    writable = policy.writable
    if ENOENT.search(line):
        # Creating a file outside the writable places never succeeds, parent or not: a
        # write the text shows is a denial, whatever else is missing.
        context = traceback_context(reading.lines, index)
        path = path_in(line, cwd)
        if (
            path is not None
            and not is_under(path, writable)
            and write_intent(line, context, path, reading.argv_text)
        ):
            yield _write(path, policy, line)
    elif policy.scratch_noexec and MAP_REFUSED.search(line):
        path = path_in(line, cwd)
        if path is not None and is_under(path, writable):
            yield Found("filesystem", f"load {path} as code", NOEXEC, line)
    elif SITE_PACKAGES.search(line):
        yield _write("the system site-packages", policy, line)
    elif UNWRITABLE.search(line):
        outside = [p for p in named_paths(line) if not is_under(resolve(p, cwd), writable)]
        if outside:
            yield _write(outside[0], policy, line)
    elif SQLITE.search(line):
        context = traceback_context(reading.lines, index)
        named = named_paths(line)
        database = named[0] if named else None
        database = database or sqlite_database(reading.argv, reading.argv_text, context)
        if database is not None and not is_under(resolve(database, cwd), writable):
            yield _write(resolve(database, cwd), policy, line)
    elif policy.scratch_noexec and (hook := _IGNORED_HOOK.search(line)):
        # git asks whether a hook is executable; on a noexec mount none is.
        path = resolve(hook["path"], cwd)
        if is_under(path, writable):
            yield Found("filesystem", f"exec {path}", NOEXEC, line)


def perl_status(reading: Reading) -> Iterator[Found]:
    """A perl program that died of EACCES or EROFS, told by its exit status when its
    message names neither (`die "tool failed: $?"`): what the argv runs from scratch, or
    the one place outside the writable ones it writes to."""
    code = reading.outcome.perl_errno()
    if code is None:
        return
    policy = reading.policy
    evidence = f"perl died with exit status {code} ({errno.errorcode[code]})"
    target = exec_target(reading.argv_text, "")
    if code == errno.EACCES and target is not None and policy.scratch_noexec:
        path = resolve(target, reading.cwd)
        if is_under(path, policy.writable):
            yield Found("filesystem", f"exec {path}", NOEXEC, evidence)
            return
    yield from _unnamed(reading, evidence, erofs=code == errno.EROFS)
