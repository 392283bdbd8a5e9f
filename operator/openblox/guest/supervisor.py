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
import sys
import time

# `typing` alone costs ~25 ms to import inside gVisor, on every exec: types only.
TYPE_CHECKING = False
if TYPE_CHECKING:
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


def frame(tag: bytes, data: bytes) -> None:
    view = memoryview(tag + len(data).to_bytes(4, "big") + data)
    while view:
        written = os.write(1, view)
        view = view[written:]


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
    try:
        status, timed_out, truncated = relay_output(tags, pid, deadline, cap)
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
                time.sleep(0.002)
    reaped = kill_tree(os.getpid())
    if status is None:
        # The command may have exited just before the kill: its own status, not the kill's.
        status = reaped.get(pid, reap().get(pid))
    exit_code, killed_by = exit_code_of(status)
    flag = {True: "true", False: "false"}
    signal_text = "null" if killed_by is None else str(killed_by)
    verdict = (
        f'{{"exit_code": {exit_code}, "timed_out": {flag[timed_out]}, '
        f'"truncated": {flag[truncated]}, "signal": {signal_text}}}'
    )
    try:
        frame(b"R", verdict.encode())
    except OSError:
        os._exit(120)


def relay_output(
    tags: dict[int, bytes], pid: int, deadline: float, cap: int
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
        ready, _, _ = select.select(open_fds, [], [], wait)
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
    directory = f"{STATE_DIR}/{name}"
    os.makedirs(directory, exist_ok=True)
    lock = os.open(f"{directory}/lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
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
    for stale in ("exit", "stdout", "stderr"):
        try:
            os.unlink(f"{directory}/{stale}")
        except FileNotFoundError:
            pass
    ready_r, ready_w = os.pipe()
    if os.fork() == 0:
        os.close(ready_r)
        os.setsid()
        # Off the exec's streams, or the exec would not end while the keeper lives.
        null = os.open("/dev/null", os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.close(null)
        keep(directory, argv, env, cwd, nproc, log_cap, ready_w)
        os._exit(0)
    os.close(ready_w)
    os.close(lock)  # the keeper holds its own copy of the locked description
    os.read(ready_r, 64)
    sys.stdout.write(json.dumps(dict(record(directory, name), started=True)) + "\n")


def keep(  # noqa: PLR0917 - one call site, in the forked keeper
    directory: str,
    argv: list[str],
    env: dict[str, str],
    cwd: str,
    nproc: int,
    cap: int,
    ready: int,
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
    _write(f"{directory}/meta", json.dumps(meta))
    logs = {out_r: f"{directory}/stdout", err_r: f"{directory}/stderr"}
    for path in logs.values():
        _write(path, "")
    os.write(ready, str(pid).encode())
    os.close(ready)
    open_fds = list(logs)
    status: int | None = None
    terminated_at: float | None = None
    grace = 0.0
    while status is None:
        if stop_requested and terminated_at is None:
            terminated_at = time.monotonic()
            grace = _read_grace(directory)
            signal_tree(os.getpid(), SIGTERM)
        if terminated_at is not None and time.monotonic() - terminated_at > grace:
            break
        try:
            ready_fds, _, _ = select.select(open_fds, [], [], 0.1)
        except InterruptedError:
            continue
        for fd in ready_fds:
            _drain_once(fd, logs[fd], cap, open_fds)
        status = reap().get(pid)
    kill_tree(os.getpid())
    if status is None:
        status = reap().get(pid)
    while open_fds:
        ready_fds, _, _ = select.select(open_fds, [], [], 0)
        if not ready_fds:
            break
        for fd in ready_fds:
            _drain_once(fd, logs[fd], cap, open_fds)
    exit_code, killed_by = exit_code_of(status)
    ended = {
        "exitCode": exit_code,
        "signal": killed_by,
        "endedAt": _now(),
        "stopped": bool(stop_requested),
    }
    _write(f"{directory}/exit", json.dumps(ended))


def _drain_once(fd: int, path: str, cap: int, open_fds: list[int]) -> None:
    data = os.read(fd, CHUNK)
    if data:
        _append_capped(path, data, cap)
    else:
        open_fds.remove(fd)


def _read_grace(directory: str) -> float:
    try:
        with open(f"{directory}/grace") as handle:
            return float(handle.read())
    except (OSError, ValueError):
        return 2.0


def _append_capped(path: str, data: bytes, cap: int) -> None:
    """Append, keeping at most the last `cap` bytes: a chatty server cannot fill the disk."""
    with open(path, "ab") as handle:
        handle.write(data)
        size = handle.tell()
    if size > cap:
        with open(path, "rb") as handle:
            handle.seek(size - cap // 2)
            tail = handle.read()
        with open(path, "wb") as handle:
            handle.write(tail)


def _write(path: str, text: str) -> None:
    with open(path + ".new", "w") as handle:
        handle.write(text)
    os.replace(path + ".new", path)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def record(directory: str, name: str) -> dict[str, Any]:
    import fcntl
    import json

    result: dict[str, Any] = {"name": name, "running": False}
    try:
        with open(f"{directory}/meta") as handle:
            result.update(json.load(handle))
    except (OSError, ValueError):
        pass
    try:
        lock = os.open(f"{directory}/lock", os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return result
    try:
        # Shared: two status checks never mistake each other for the keeper.
        fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        result["running"] = True
    finally:
        os.close(lock)
    if not result["running"]:
        try:
            with open(f"{directory}/exit") as handle:
                result.update(json.load(handle))
        except (OSError, ValueError):
            pass
    return result


def ps(_: list[str]) -> None:
    import json

    try:
        names = sorted(os.listdir(STATE_DIR))
    except FileNotFoundError:
        names = []
    for name in names:
        sys.stdout.write(json.dumps(record(f"{STATE_DIR}/{name}", name)) + "\n")


def stop(args: list[str]) -> None:
    import json

    name, grace = args[0], float(args[1])
    directory = f"{STATE_DIR}/{name}"
    if not os.path.isdir(directory):
        sys.stderr.write(f"no process named {name}\n")
        sys.exit(3)
    current = record(directory, name)
    if current["running"]:
        keeper = int(current["keeper"])
        if keeper <= 1:
            # The record lives where the guest can write: never signal -1, 0 or init.
            sys.stderr.write(f"the record of {name} names no keeper\n")
            sys.exit(4)
        _write(f"{directory}/grace", str(grace))
        os.kill(keeper, SIGTERM)
        deadline = time.monotonic() + grace + 2
        while record(directory, name)["running"] and time.monotonic() < deadline:
            time.sleep(0.05)
        if record(directory, name)["running"]:
            # The keeper did not finish in time: end its tree, then it.
            for pid in descendants(keeper):
                try:
                    os.kill(pid, SIGKILL)
                except OSError:
                    pass
            os.kill(keeper, SIGKILL)
            while record(directory, name)["running"] and time.monotonic() < deadline + 2:
                time.sleep(0.05)
    sys.stdout.write(json.dumps(record(directory, name)) + "\n")


def logs(args: list[str]) -> None:
    name, stream, limit = args[0], args[1], int(args[2])
    path = f"{STATE_DIR}/{name}/{stream}"
    try:
        with open(path, "rb") as handle:
            handle.seek(0, 2)
            handle.seek(max(0, handle.tell() - limit))
            data = handle.read()
    except FileNotFoundError:
        sys.stderr.write(f"no process named {name}\n")
        sys.exit(3)
    sys.stdout.buffer.write(data)


MODES = {"run": run, "start": start, "ps": ps, "stop": stop, "logs": logs}

if __name__ == "__main__":
    MODES[sys.argv[1]](sys.argv[2:])
