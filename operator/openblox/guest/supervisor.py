"""Runs inside the sandbox around every command the client starts.

Sent as `python3 -I -S -c <this file> MODE ...`, so it must stay standard library only
and self-contained; `-I -S` keeps a file the guest wrote into the working directory
from being imported in place of a standard module, and skips `site` for start-up time.
It imports little for the same reason: every import is paid on every exec.

Modes:
  run TIMEOUT CAP NPROC CWD [KEY=VALUE ...] -- ARGV...   one command, waited for
  start NAME NPROC CWD LOGCAP [KEY=VALUE ...] -- ARGV... a named background command
  ps                                                     the named commands, JSON lines
  stop NAME GRACE                                        end a named command's tree
  logs NAME STREAM LIMIT                                 the tail of its stdout/stderr

The last four read a state directory the guest can write, so they trust and follow
nothing there (see "background commands" below).

Every guest command gets, before it starts: a syscall filter (no new namespaces, no
mounts, no BPF/perf/userfaultfd/keyrings; clone3 answers ENOSYS so glibc falls back to
clone, whose flags the filter can read), no_new_privs, and RLIMIT_NPROC set to the
profile's process cap, which gVisor enforces for the sandbox user. The filter and the
limit are inherited and cannot be lifted by the command.

`run` makes itself a child subreaper, so anything the command forks (including `setsid`
and double-forked daemons) stays its descendant and is killed with it. Output is framed
(one tag byte, a 4-byte length, the data) so the caller can tell the command's bytes
from the verdict: everything the command writes is framed by the supervisor.

One file over 400 lines on purpose: it is sent whole as one `-c` argument on every exec,
and a guest program cannot import a sibling module.
"""

from __future__ import annotations

import ctypes

# The first act in every mode, before anything else: not dumpable (PR_SET_DUMPABLE, 0). The
# guest runs as this uid, and a process of that uid may open /proc/<pid>/fd/1 or fd/2 of a
# dumpable process: through them it could write a forged frame or verdict into this
# supervisor's stream, or a flood into its stderr. A process that is not dumpable has its
# /proc/<pid> entries owned by root, closed to the guest. It cannot cover the interpreter's
# start-up before this line; what holds whatever reaches the stream is the client, which
# bounds and checks it all (THREAT_MODEL.md, "What comes back to the caller"). The keeper
# `start` forks inherits it (a fork keeps it); only the command's own execve resets it.
PR_SET_DUMPABLE = 4
if __name__ == "__main__":
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)

import os
import select
import stat
import sys
import time

# `typing` alone costs ~25 ms to import inside gVisor, on every exec: types only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, NoReturn

PR_SET_SECCOMP = 22
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
SECCOMP_MODE_FILTER = 2
RLIMIT_NPROC = 6
SIGKILL = 9
SIGTERM = 15
EPERM = 1
ENOSYS = 38
ELOOP = 40
CHUNK = 65536
# Under names.py's STATE_DIR (a copy, held to it by tests/unit/test_names.py).
STATE_DIR = "/run/openblox/processes"

# Syscall numbers: (audit arch, refused with EPERM, clone3, checked for namespace flags).
_X86_64 = (
    0xC000003E,
    # setns mount umount2 pivot_root open_tree..fspick mount_setattr bpf perf_event_open
    # userfaultfd add_key request_key keyctl
    (308, 165, 166, 155, 428, 429, 430, 431, 432, 433, 442, 321, 298, 323, 248, 249, 250),
    435,
    (272, 56),  # unshare, clone
)
_AARCH64 = (
    0xC00000B7,
    (268, 40, 39, 41, 428, 429, 430, 431, 432, 433, 442, 280, 241, 282, 217, 218, 219),
    435,
    (97, 220),
)
# CLONE_NEWTIME | CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC |
# CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET
NAMESPACE_FLAGS = 0x00000080 | 0x00020000 | 0x7E000000
RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_ALLOW = 0x7FFF0000
LD_ABS, JEQ, JGE, JSET, RET = 0x20, 0x15, 0x35, 0x45, 0x06


Table = tuple[int, tuple[int, ...], int, tuple[int, ...]]
Instruction = tuple[int, int, int, int]


def seccomp_program(table: Table) -> list[Instruction]:
    """The filter as (code, jt, jf, k) instructions; x32 and foreign-arch calls are refused."""
    arch, refused, clone3, flagged = table
    program: list[Instruction] = [
        (LD_ABS, 0, 0, 4),
        (JEQ, 1, 0, arch),
        (RET, 0, 0, RET_KILL_PROCESS),
    ]
    program.append((LD_ABS, 0, 0, 0))
    tests = [(JGE, 0x40000000, "enosys"), (JEQ, clone3, "enosys")]
    tests += [(JEQ, number, "eperm") for number in refused]
    tests += [(JEQ, number, "flags") for number in flagged]
    allow = len(program) + len(tests)
    targets = {"flags": allow + 1, "eperm": allow + 4, "enosys": allow + 5}
    for code, k, target in tests:
        program.append((code, targets[target] - len(program) - 1, 0, k))
    program += [
        (RET, 0, 0, RET_ALLOW),
        (LD_ABS, 0, 0, 16),  # the low half of args[0]: clone's and unshare's flags
        (JSET, 1, 0, NAMESPACE_FLAGS),
        (RET, 0, 0, RET_ALLOW),
        (RET, 0, 0, RET_ERRNO | EPERM),
        (RET, 0, 0, RET_ERRNO | ENOSYS),
    ]
    return program


def confine(libc: ctypes.CDLL, nproc: int) -> None:
    """Limits for a guest command, applied in the child just before exec. Raises on failure."""
    if nproc > 0:
        limit = (ctypes.c_ulong * 2)(nproc, nproc)
        if libc.setrlimit(RLIMIT_NPROC, limit) != 0:
            raise OSError(ctypes.get_errno(), "setrlimit(RLIMIT_NPROC) failed")
    machine = os.uname().machine
    table: Table | None = {"x86_64": _X86_64, "aarch64": _AARCH64}.get(machine)
    if table is None:
        raise OSError(ENOSYS, f"no syscall filter for {machine}")
    program = seccomp_program(table)
    raw = b"".join(
        code.to_bytes(2, "little") + bytes((jt, jf)) + k.to_bytes(4, "little")
        for code, jt, jf, k in program
    )
    buffer = ctypes.create_string_buffer(raw, len(raw))

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = Program(len(program), ctypes.cast(buffer, ctypes.c_void_p))
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "installing the syscall filter failed")


def exec_confined(
    libc: ctypes.CDLL, argv: list[str], env: dict[str, str], cwd: str, nproc: int
) -> NoReturn:
    """In a forked child: confine, then become the command. Never returns."""
    # Python ignores SIGPIPE and SIGXFSZ, and an ignored signal stays ignored across
    # exec: the command gets the defaults, as under a shell. Its own process group keeps
    # a `kill 0` in it away from this supervisor.
    import _signal  # type: ignore[import-not-found]  # the C module: `signal` imports enum

    _signal.signal(_signal.SIGPIPE, _signal.SIG_DFL)
    _signal.signal(_signal.SIGXFSZ, _signal.SIG_DFL)
    os.setpgid(0, 0)
    try:
        if cwd:
            os.chdir(cwd)
        confine(libc, nproc)
    except OSError as error:
        # Fail closed: a command never runs without its limits.
        os.write(2, f"openblox: not starting {argv[0]}: {error.strerror or error}\n".encode())
        os._exit(126)
    try:
        os.execvpe(argv[0], argv, env)
    except FileNotFoundError as error:
        os.write(2, f"openblox: {argv[0]}: {error.strerror or 'not found'}\n".encode())
        os._exit(127)
    except OSError as error:
        os.write(2, f"openblox: {argv[0]}: {error.strerror}\n".encode())
        os._exit(126)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def frame(tag: bytes, data: bytes) -> None:
    write_all(1, tag + len(data).to_bytes(4, "big") + data)


def descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: split after the last ')'.
        fields = stat[stat.rfind(b")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(entry))
    found: list[int] = []
    frontier = [root]
    while frontier:
        for child in children.get(frontier.pop(), []):
            found.append(child)
            frontier.append(child)
    return found


def signal_tree(root: int, signal: int) -> None:
    for pid in descendants(root):
        try:
            os.kill(pid, signal)
        except OSError:
            pass


def kill_tree(root: int) -> dict[int, int]:
    """SIGKILL every descendant until none is left; the statuses of those reaped."""
    statuses: dict[int, int] = {}
    for _ in range(200):
        left = descendants(root)
        if not left:
            break
        for pid in left:
            try:
                os.kill(pid, SIGKILL)
            except OSError:
                pass
        statuses.update(reap())
        time.sleep(0.005)
    return statuses


def reap() -> dict[int, int]:
    statuses: dict[int, int] = {}
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return statuses
        if pid == 0:
            return statuses
        statuses[pid] = status


def split_command(args: list[str]) -> tuple[dict[str, str], list[str]]:
    """(env overrides, argv) from `KEY=VALUE ... -- ARGV...`."""
    marker = args.index("--")
    env = dict(os.environ)
    for pair in args[:marker]:
        key, _, value = pair.partition("=")
        env[key] = value
    return env, args[marker + 1 :]


def exit_code_of(status: int | None) -> tuple[int, int | None]:
    """(exit code, signal or None): a kill is told apart from exit(137)."""
    if status is None:
        return 128 + SIGKILL, SIGKILL
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status), os.WTERMSIG(status)
    return os.WEXITSTATUS(status), None


def subreaper_libc() -> ctypes.CDLL:
    """libc, once this process is a child subreaper: whatever its command forks (setsid,
    double forks) stays its descendant, to be ended with it."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    return libc


def run(args: list[str]) -> None:
    timeout, cap, nproc, cwd = float(args[0]), int(args[1]), int(args[2]), args[3]
    env, argv = split_command(args[4:])
    deadline = time.monotonic() + timeout
    # Not dumpable since its first line, so the command (same uid) cannot open
    # /proc/<this>/fd/1 to forge frames. It can still kill this process; the caller's own
    # deadline and output cap hold regardless.
    libc = subreaper_libc()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        for fd in (out_r, out_w, err_r, err_w):
            os.close(fd)
        exec_confined(libc, argv, env, cwd, nproc)
    os.close(out_w)
    os.close(err_w)
    tags = {out_r: b"O", err_r: b"E"}
    stall = Stall()
    try:
        status, timed_out, truncated = relay_output(tags, pid, deadline, cap, stall)
    except OSError:
        # The caller is gone (EPIPE): nobody reads the output; the tree ends now.
        kill_tree(os.getpid())
        os._exit(120)
    while status is None and not timed_out:
        status = reap().get(pid)
        if status is None:
            if time.monotonic() >= deadline:
                timed_out = True
            else:
                stall.sleep(0.002)
    reaped = kill_tree(os.getpid())
    if status is None:
        # The command may have exited just before the kill: its own status, not the kill's.
        status = reaped.get(pid, reap().get(pid))
    exit_code, killed_by = exit_code_of(status)
    flag = {True: "true", False: "false"}
    signal_text = "null" if killed_by is None else str(killed_by)
    verdict = (
        f'{{"exit_code": {exit_code}, "timed_out": {flag[timed_out]}, '
        f'"truncated": {flag[truncated]}, "signal": {signal_text}, '
        f'"stalled": {stall.recent(time.monotonic()):.1f}}}'
    )
    try:
        frame(b"R", verdict.encode())
    except OSError:
        os._exit(120)


class Stall:
    """Times this process went unscheduled past a wait it asked for.

    When a node is frozen or starved of CPU, gVisor's systrap platform kills a process whose
    stub stops answering (SIGKILL or SIGSEGV): that exit is then not the command's own, and
    the verdict's "stalled" lets the client say so (docs/reliability.md). It is the longest
    stall that ended within `WINDOW` seconds of the verdict, since gVisor's kill follows
    the stall at once: an old stall says nothing of a later kill."""

    WINDOW = 30.0
    NOTED = 1.0  # shorter ones are scheduling noise, not kept
    KEPT = 64

    def __init__(self) -> None:
        self.stalls: list[tuple[float, float]] = []  # (when it ended, how long), newest last

    def note(self, end: float, over: float) -> None:
        if over >= self.NOTED:
            self.stalls = [*self.stalls[-(self.KEPT - 1) :], (end, over)]

    def recent(self, moment: float) -> float:
        """The longest stall that ended within the window before `moment`."""
        lengths = [over for end, over in self.stalls if end >= moment - self.WINDOW]
        return min(max(lengths, default=0.0), 1e6)

    def _note(self, start: float, asked: float) -> None:
        end = time.monotonic()
        self.note(end, end - start - asked)

    def select(self, fds: list[int], wait: float) -> list[int]:
        start = time.monotonic()
        ready, _, _ = select.select(fds, [], [], wait)
        self._note(start, wait)
        return ready

    def sleep(self, seconds: float) -> None:
        start = time.monotonic()
        time.sleep(seconds)
        self._note(start, seconds)


def relay_output(
    tags: dict[int, bytes], pid: int, deadline: float, cap: int, stall: Stall
) -> tuple[int | None, bool, bool]:
    """Frame the command's output until it ends or the deadline passes.

    (status if reaped, timed out, truncated); raises OSError when the caller is gone.
    """
    open_fds = list(tags)
    sent = 0
    truncated = timed_out = False
    status: int | None = None
    while open_fds:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            timed_out = True
            break
        if status is None:
            status = reap().get(pid)
        # Once the command has exited, descendants holding its pipes are not waited for.
        wait = min(remaining, 0.05 if status is not None else 0.5)
        ready = stall.select(open_fds, wait)
        if not ready and status is not None:
            break
        for fd in ready:
            data = os.read(fd, CHUNK)
            if not data:
                open_fds.remove(fd)
                continue
            room = cap - sent
            if room <= 0:
                truncated = True  # keep reading so the command never blocks on a full pipe
                continue
            if len(data) > room:
                data, truncated = data[:room], True
            sent += len(data)
            frame(tags[fd], data)
    return status, timed_out, truncated


# ---------------------------------------------------------------- background commands
#
# Each named command has a directory under STATE_DIR, and the guest can write there: it may
# plant links, FIFOs, huge or malformed records. So nothing there is trusted or followed.
# Every file is opened relative to a directory descriptor with O_NOFOLLOW; only regular
# files are read, and only up to a bound; every field read back is checked before it is
# passed on, and the answer to the caller is bounded; no pid read from a record is ever
# signalled (stop asks the keeper, and the keeper signals only its own descendants).

# Copies of the client's (client/processes.py, client/background.py), held equal to them
# by tests/unit/test_names.py: the bound on an answer, and two exit codes it acts on.
ANSWER_BYTES = 1048576  # 1 MiB
NO_SUCH_PROCESS = 3
DAMAGED = 5
# `stop`'s exit code when the keeper did not end within the grace (its message says so).
NOT_STOPPED = 6
# What a keeper writes in a record (meta, exit, stop) is far smaller; a larger one was planted.
RECORD_BYTES = 64 * 1024
# `ps` looks at no more entries of the state directory than this.
MAX_ENTRIES = 1024
# Room kept at the end of `ps`'s answer for the line that counts what it left out.
TRAILER_BYTES = 64
# Linux's PID_MAX_LIMIT: a record naming a pid outside (1, PID_MAX) was not a keeper's.
PID_MAX = 1 << 22
DEFAULT_GRACE = 2.0
OPEN_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO planted under a file's name cannot hang the open.
OPEN_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
CREATE_FILE = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class Damaged(Exception):
    """What the state directory holds is not what a keeper wrote: refused, never followed."""


def valid_name(name: str) -> bool:
    """The client's rule for a process name (client/processes.py), without importing `re`."""
    allowed = "abcdefghijklmnopqrstuvwxyz0123456789._-"
    return (
        0 < len(name) <= 63
        and all(character in allowed for character in name)
        and name[0] not in "._-"
        and name[-1] not in "._-"
        and ".." not in name
    )


def state_directory(create: bool = False) -> int:
    """STATE_DIR, opened without following a link put in its place. Its parent is the
    volume's mount point, on the read-only root: nothing in the sandbox can move it."""
    parent, _, leaf = STATE_DIR.rpartition("/")
    base = os.open(parent, OPEN_DIRECTORY)
    try:
        if create:
            try:
                os.mkdir(leaf, 0o700, dir_fd=base)
            except FileExistsError:
                pass
        return open_directory(base, leaf)
    finally:
        os.close(base)


def open_directory(parent: int, name: str) -> int:
    try:
        return os.open(name, OPEN_DIRECTORY, dir_fd=parent)
    except FileNotFoundError:
        raise
    except OSError as error:
        raise Damaged(f"{name} {refusal(parent, name, error, 'is not a directory')}") from None


def refusal(parent: int, name: str, error: OSError, otherwise: str) -> str:
    """Why an open refused `name`: a link stood there (O_NOFOLLOW), or `otherwise`."""
    try:
        link = stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
    except OSError:
        link = False
    if link or error.errno == ELOOP:
        return "is a symbolic link"
    return f"{otherwise} ({error.strerror})"


def open_regular(directory: int, name: str, flags: int = OPEN_FILE) -> int:
    """`name` in `directory` if it is a regular file, never through a link; else Damaged
    (FileNotFoundError, without O_CREAT, when there is none)."""
    try:
        fd = os.open(name, flags, 0o600, dir_fd=directory)
    except FileNotFoundError:
        raise
    except OSError as error:  # EEXIST: planted between the unlink and the create
        raise Damaged(f"{name} {refusal(directory, name, error, 'cannot be used')}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise Damaged(f"{name} is not a regular file")
    return fd


def read_at(fd: int, offset: int, count: int) -> bytes:
    """At most `count` bytes from `offset`, however the file grows meanwhile."""
    chunks = []
    while count > 0:
        data = os.pread(fd, min(count, CHUNK), offset)
        if not data:
            break
        chunks.append(data)
        offset += len(data)
        count -= len(data)
    return b"".join(chunks)


def read_record(directory: int, name: str) -> bytes:
    fd = open_regular(directory, name)
    try:
        data = read_at(fd, 0, RECORD_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > RECORD_BYTES:
        raise Damaged(f"{name} is larger than {RECORD_BYTES} bytes")
    return data


def write_record(directory: int, name: str, text: str) -> None:
    """Replace `name` with `text` at once (a reader sees the old or the new), never writing
    through a link: the new file is made afresh and renamed over whatever stood there."""
    temporary = f".{name}.new"
    try:
        try:
            os.unlink(temporary, dir_fd=directory)
        except FileNotFoundError:
            pass
        fd = os.open(temporary, CREATE_FILE, 0o600, dir_fd=directory)
        try:
            write_all(fd, text.encode())
        finally:
            os.close(fd)
        os.replace(temporary, name, src_dir_fd=directory, dst_dir_fd=directory)
    except OSError as error:
        raise Damaged(f"{name} cannot be written ({error.strerror})") from None


def _stamp(value: object) -> bool:
    return isinstance(value, str) and len(value) == 20 and set(value) <= set("0123456789-:TZ")


def _whole(value: object, low: int, high: int) -> bool:
    return type(value) is int and low <= value <= high


# Each field a record may pass on, and its check; any other field is dropped.
META_FIELDS: dict[str, Callable[[object], bool]] = {
    "argv": lambda v: type(v) is list and all(type(part) is str for part in v),
    "pid": lambda v: _whole(v, 2, PID_MAX - 1),
    "startedAt": _stamp,
}
EXIT_FIELDS: dict[str, Callable[[object], bool]] = {
    "exitCode": lambda v: _whole(v, 0, 255),
    "signal": lambda v: v is None or _whole(v, 1, 127),
    "endedAt": _stamp,
    "stopped": lambda v: type(v) is bool,
}


def checked_fields(
    directory: int, name: str, fields: dict[str, Callable[[object], bool]], problems: list[str]
) -> dict[str, Any]:
    """The fields of the JSON record `name` that pass their checks; what did not, in `problems`."""
    import json

    try:
        loaded = json.loads(read_record(directory, name))
    except FileNotFoundError:
        return {}
    except Damaged as error:
        problems.append(str(error))
        return {}
    except (ValueError, RecursionError):
        loaded = None
    if not isinstance(loaded, dict):
        problems.append(f"{name} is not a JSON object")
        return {}
    checked = {}
    for field, check in fields.items():
        if field in loaded and check(loaded[field]):
            checked[field] = loaded[field]
        elif field in loaded:
            problems.append(f"{name}: {field} is not valid")
    return checked


def keeper_alive(directory: int) -> bool:
    """Whether a keeper holds the lock: it does for as long as its command runs."""
    import fcntl

    try:
        lock = open_regular(directory, "lock")
    except FileNotFoundError:
        return False
    try:
        # Shared: two status checks never mistake each other for the keeper.
        fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(lock)
    return False


def record(directory: int, name: str) -> dict[str, Any]:
    """What the keeper of `name` wrote, field by field as checked; `running` from its lock.
    A record the guest damaged keeps its name, and `unreadable` says what was wrong."""
    problems: list[str] = []
    result: dict[str, Any] = {"name": name, "running": False}
    try:
        result["running"] = keeper_alive(directory)
    except Damaged as error:
        problems.append(str(error))
    result.update(checked_fields(directory, "meta", META_FIELDS, problems))
    if not result["running"]:
        result.update(checked_fields(directory, "exit", EXIT_FIELDS, problems))
    if problems:
        result["unreadable"] = "; ".join(problems)
    return result


def process_directory(name: str) -> int:
    """The directory of `name`; exits NO_SUCH_PROCESS when there is none."""
    if not valid_name(name):
        sys.stderr.write(f"{name!r:.80} is not a process name\n")
        sys.exit(2)
    try:
        state = state_directory()
        try:
            return open_directory(state, name)
        finally:
            os.close(state)
    except FileNotFoundError:
        sys.stderr.write(f"no process named {name}\n")
        sys.exit(NO_SUCH_PROCESS)


def start(args: list[str]) -> None:
    """Start NAME unless it is running; print its record either way.

    A keeper process per command holds an exclusive lock on the command's directory for
    as long as the command runs, so "running" needs no pid guessing, and a second start
    of the same name finds the lock taken and starts nothing. The keeper is a subreaper
    and ends the command's whole tree when the command's first process exits or on stop.
    """
    import fcntl
    import json

    name, nproc, cwd, log_cap = args[0], int(args[1]), args[2], int(args[3])
    env, argv = split_command(args[4:])
    if not valid_name(name):
        sys.stderr.write(f"{name!r:.80} is not a process name\n")
        sys.exit(2)
    state = state_directory(create=True)
    try:
        os.mkdir(name, 0o700, dir_fd=state)
    except FileExistsError:
        pass
    directory = open_directory(state, name)
    os.close(state)
    lock = open_regular(directory, "lock", os.O_RDWR | os.O_CREAT | OPEN_FILE)
    for _ in range(100):
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            current = record(directory, name)
            if current["running"]:
                sys.stdout.write(json.dumps(dict(current, started=False)) + "\n")
                return
            time.sleep(0.01)  # a status check held the lock for a moment
    else:
        sys.stderr.write(f"the lock of {name} stayed busy\n")
        sys.exit(4)
    # A stop request left from before would end the new command at once.
    for stale in ("meta", "exit", "stop", "stdout", "stderr"):
        try:
            os.unlink(stale, dir_fd=directory)
        except FileNotFoundError:
            pass
        except OSError as error:  # a directory planted under the name
            raise Damaged(f"{stale} cannot be removed ({error.strerror})") from None
    logs = [open_regular(directory, stream, CREATE_FILE) for stream in ("stdout", "stderr")]
    ready_r, ready_w = os.pipe()
    if os.fork() == 0:
        os.close(ready_r)
        os.setsid()
        # Off the exec's streams, or the exec would not end while the keeper lives.
        null = os.open("/dev/null", os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.close(null)
        keep(directory, argv, env, cwd, nproc, log_cap, ready_w, logs)
        os._exit(0)
    os.close(ready_w)
    for fd in (lock, *logs):
        os.close(fd)  # the keeper holds its own copies (the lock's description stays locked)
    os.read(ready_r, 64)
    sys.stdout.write(json.dumps(dict(record(directory, name), started=True)) + "\n")


def keep(  # noqa: PLR0917 - one call site, in the forked keeper
    directory: int,
    argv: list[str],
    env: dict[str, str],
    cwd: str,
    nproc: int,
    cap: int,
    ready: int,
    logs: list[int],
) -> None:
    import json
    import signal

    libc = subreaper_libc()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    stop_requested: list[bool] = []
    signal.signal(SIGTERM, lambda *_: stop_requested.append(True))
    pid = os.fork()
    if pid == 0:
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        for fd in (out_r, out_w, err_r, err_w, ready):
            os.close(fd)
        signal.signal(SIGTERM, signal.SIG_DFL)
        exec_confined(libc, argv, env, cwd, nproc)
    for fd in (out_w, err_w):
        os.close(fd)
    meta = {"argv": argv, "pid": pid, "keeper": os.getpid(), "startedAt": _now()}
    _keep_writing(directory, "meta", json.dumps(meta))
    outputs = {out_r: logs[0], err_r: logs[1]}
    os.write(ready, str(pid).encode())
    os.close(ready)
    open_fds = list(outputs)
    status: int | None = None
    terminated_at: float | None = None
    grace = looked = 0.0
    while status is None:
        if terminated_at is None and time.monotonic() - looked >= 0.1:
            looked = time.monotonic()
            asked = stop_asked(directory)
            if asked is not None or stop_requested:
                terminated_at = looked
                grace = DEFAULT_GRACE if asked is None else asked
                stop_requested.append(True)
                signal_tree(os.getpid(), SIGTERM)
        if terminated_at is not None and time.monotonic() - terminated_at > grace:
            break
        try:
            ready_fds, _, _ = select.select(open_fds, [], [], 0.1)
        except InterruptedError:
            continue
        for fd in ready_fds:
            _drain_once(fd, outputs[fd], cap, open_fds)
        status = reap().get(pid)
    kill_tree(os.getpid())
    if status is None:
        status = reap().get(pid)
    while open_fds:
        ready_fds, _, _ = select.select(open_fds, [], [], 0)
        if not ready_fds:
            break
        for fd in ready_fds:
            _drain_once(fd, outputs[fd], cap, open_fds)
    exit_code, killed_by = exit_code_of(status)
    ended = {
        "exitCode": exit_code,
        "signal": killed_by,
        "endedAt": _now(),
        "stopped": bool(stop_requested),
    }
    _keep_writing(directory, "exit", json.dumps(ended))


def stop_asked(directory: int) -> float | None:
    """The grace of a stop asked for through `stop` in the keeper's directory; None if none
    was. Whatever stands there asks (the guest may stop its own command); only a regular
    file's number is taken for the grace."""
    try:
        text = read_record(directory, "stop")
    except FileNotFoundError:
        return None
    except Damaged:
        return DEFAULT_GRACE
    try:
        grace = float(text)
    except ValueError:
        return DEFAULT_GRACE
    return grace if 0 <= grace < 1e9 else DEFAULT_GRACE


def _keep_writing(directory: int, name: str, text: str) -> None:
    """A keeper's record; one the guest kept from being written is left out, not fatal."""
    try:
        write_record(directory, name, text)
    except Damaged:
        pass


def _drain_once(fd: int, log: int, cap: int, open_fds: list[int]) -> None:
    data = os.read(fd, CHUNK)
    if data:
        _append_capped(log, data, cap)
    else:
        open_fds.remove(fd)


def _append_capped(log: int, data: bytes, cap: int) -> None:
    """Append, keeping at most the last `cap` bytes: a chatty server cannot fill the disk.
    Through the keeper's own descriptor, so nothing planted under the log's name is written
    through; a full disk costs these bytes, never the keeper."""
    try:
        write_all(log, data)
        size = os.lseek(log, 0, os.SEEK_CUR)
        if size > cap:
            tail = read_at(log, size - cap // 2, cap // 2)
            os.ftruncate(log, 0)
            os.lseek(log, 0, os.SEEK_SET)
            write_all(log, tail)
    except OSError:
        pass


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def ps(_: list[str]) -> None:
    """One JSON line per command, sorted by name, within ANSWER_BYTES; then, if any entry of
    the state directory was left out (not a command's directory, or past a bound), a last
    line {"omitted": N}."""
    import json

    try:
        state = state_directory()
    except FileNotFoundError:
        return
    names: list[str] = []
    omitted = 0
    with os.scandir(state) as entries:
        for entry in entries:
            if len(names) + omitted >= MAX_ENTRIES:
                omitted += 1  # one at least: the rest is not looked at
                break
            if valid_name(entry.name) and entry.is_dir(follow_symlinks=False):
                names.append(entry.name)
            else:
                omitted += 1
    sent = 0
    for index, name in enumerate(sorted(names)):
        try:
            directory = open_directory(state, name)
        except (FileNotFoundError, Damaged):  # removed or replaced since the listing
            omitted += 1
            continue
        try:
            line = json.dumps(record(directory, name)) + "\n"
        finally:
            os.close(directory)
        if sent + len(line) > ANSWER_BYTES - TRAILER_BYTES:
            omitted += len(names) - index
            break
        sys.stdout.write(line)
        sent += len(line)
    if omitted:
        sys.stdout.write(json.dumps({"omitted": omitted}) + "\n")


def stop(args: list[str]) -> None:
    import json

    name, grace = args[0], float(args[1])
    directory = process_directory(name)
    if record(directory, name)["running"]:
        # Asked, never signalled: the keeper's pid is only what a record says, and the
        # guest writes records. The keeper signals only its own descendants.
        write_record(directory, "stop", repr(grace))
        deadline = time.monotonic() + grace + 2
        while keeper_alive(directory) and time.monotonic() < deadline:
            time.sleep(0.05)
        if keeper_alive(directory):
            sys.stderr.write(
                f"{name} did not stop within {grace + 2:.0f}s: its keeper did not answer\n"
            )
            sys.exit(NOT_STOPPED)
    sys.stdout.write(json.dumps(record(directory, name)) + "\n")


def logs(args: list[str]) -> None:
    """The last LIMIT bytes of a command's STREAM, read from a regular file only."""
    name, stream, limit = args[0], args[1], int(args[2])
    if stream not in ("stdout", "stderr"):
        sys.stderr.write(f"{stream!r:.80} is not stdout or stderr\n")
        sys.exit(2)
    directory = process_directory(name)
    try:
        log = open_regular(directory, stream)
    except FileNotFoundError:
        sys.stderr.write(f"no process named {name}\n")
        sys.exit(NO_SUCH_PROCESS)
    size = os.fstat(log).st_size
    sys.stdout.buffer.write(read_at(log, max(0, size - limit), limit))


MODES = {"run": run, "start": start, "ps": ps, "stop": stop, "logs": logs}

if __name__ == "__main__":
    mode, arguments = sys.argv[1], sys.argv[2:]
    try:
        MODES[mode](arguments)
    except Damaged as error:
        about = f" of {arguments[0]}" if mode in ("start", "stop", "logs") else ""
        sys.stderr.write(
            f"the state{about} in the sandbox is damaged, so it was refused: {error}\n"
        )
        sys.exit(DAMAGED)
