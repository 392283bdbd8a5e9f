"""Runs inside the sandbox around every exec: timeout, output cap, whole-tree kill.

Sent as `python3 -c <this file> <config json> -- argv...`, so it must stay standard
library only and self-contained. It makes itself a child subreaper, so anything the
command forks (including `setsid` and double-forked daemons) stays its descendant and is
killed with the command. Output is framed (one tag byte, a 4-byte length, the data) so
the caller can tell the command's bytes from the supervisor's verdict, which the command
cannot forge: everything it writes is framed by the supervisor.
"""

import ctypes
import json
import os
import select
import signal
import struct
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
PR_SET_DUMPABLE = 4
CHUNK = 65536


def frame(tag: bytes, data: bytes) -> None:
    header = tag + struct.pack(">I", len(data))
    view = memoryview(header + data)
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


def kill_tree(root: int) -> None:
    """SIGKILL every descendant until none is left; reap them as they die."""
    for _ in range(200):
        left = descendants(root)
        if not left:
            return
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        reap()
        time.sleep(0.005)


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


def main() -> None:
    config = json.loads(sys.argv[1])
    argv = sys.argv[3:]
    deadline = time.monotonic() + float(config["timeout"])
    cap = int(config["cap"])
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        # Not dumpable: the command (same uid) cannot open /proc/<this>/fd/1 to forge
        # frames, nor ptrace this process. It can still kill it; the caller's own
        # deadline and output cap hold regardless.
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        for fd in (out_r, out_w, err_r, err_w):
            os.close(fd)
        env = dict(os.environ)
        env.update(config.get("env") or {})
        try:
            if config.get("cwd"):
                os.chdir(config["cwd"])
            os.execvpe(argv[0], argv, env)
        except FileNotFoundError as error:
            os.write(2, f"openblox: {argv[0]}: {error.strerror or 'not found'}\n".encode())
            os._exit(127)
        except OSError as error:
            os.write(2, f"openblox: {argv[0]}: {error.strerror}\n".encode())
            os._exit(126)
    os.close(out_w)
    os.close(err_w)
    tags = {out_r: b"O", err_r: b"E"}
    open_fds = [out_r, err_r]
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
    if status is None and not timed_out:
        while status is None and time.monotonic() < deadline:
            status = reap().get(pid)
            if status is None:
                time.sleep(0.005)
        timed_out = status is None
    kill_tree(os.getpid())
    if status is None:
        status = reap().get(pid)
    # The signal that ended the command, apart from its exit code: exit(137) is not a kill.
    killed_by: int | None = None
    if status is None:
        exit_code = 128 + signal.SIGKILL
        killed_by = int(signal.SIGKILL)
    elif os.WIFSIGNALED(status):
        killed_by = os.WTERMSIG(status)
        exit_code = 128 + killed_by
    else:
        exit_code = os.WEXITSTATUS(status)
    verdict = {
        "exit_code": exit_code,
        "timed_out": timed_out,
        "truncated": truncated,
        "signal": killed_by,
    }
    frame(b"R", json.dumps(verdict).encode())


main()
