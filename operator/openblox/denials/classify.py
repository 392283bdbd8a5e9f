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

import posixpath
import re
import signal as signals
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime

from openblox.denials.record import Category, Denial
from openblox.names import STATE_DIR, TMP_DIR, WORKSPACE_DIR

# Only the end of long output is read: errors come last, and the regexes stay cheap.
SCAN_BYTES = 64 * 1024
MAX_DENIALS = 10
_TRACEBACK_WINDOW = 60


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


# ---------------------------------------------------------------- evidence patterns

_UNREACHABLE = re.compile(
    r"Network is unreachable|No route to host|ENETUNREACH|EHOSTUNREACH|network is unreachable"
    r"|no route to host"
)
_DNS = re.compile(
    r"Temporary failure in name resolution|Name or service not known"
    r"|No address associated with hostname|Could not resolve host|Could not resolve proxy"
    r"|getaddrinfo (?:EAI_AGAIN|ENOTFOUND)|unable to resolve host|Name does not resolve"
    r"|lookup \S+ on \S+: (?:dial|read|no such host|server misbehaving)"
    r"|Resolving \S+ \S*\s*failed|Temporary failure resolving|nodename nor servname"
    r"|\[Errno -[235]\]"
)
_EROFS = re.compile(r"Read-only file system|EROFS")
_EACCES = re.compile(r"Permission denied|EACCES")
_EPERM = re.compile(r"Operation not permitted|EPERM\b")
_PRIVILEGE_WORDS = re.compile(
    r"must be superuser|must be root|you must be root|Authentication failure"
    r"|not in the sudoers|sudo: (?:command )?not found|sudo: not found|\bsu: .*(?:failure|denied)"
    r"|cannot set niceness|setting key .*(?:Invalid argument|Permission denied|Read-only)"
    r"|permission denied on key|Only root can|requires root|need to be root"
)
_ENOSPC = re.compile(r"No space left on device|ENOSPC|Disk quota exceeded|EDQUOT")
_FORK_REFUSED = re.compile(
    r"fork: (?:retry: )?Resource temporarily unavailable|Cannot fork|can't fork|fork failed"
    r"|can't start new thread|pthread_create failed|fork: Resource temporarily"
    r"|unable to create new native thread|failed to create thread"
)
_EAGAIN = re.compile(r"Resource temporarily unavailable|EAGAIN")
_FORK_CONTEXT = re.compile(
    r"\bfork\b|_fork_exec|_execute_child|Popen|posix_spawn|\bspawn|start_new_thread"
    r"|\bclone\b|multiprocessing|ProcessPool|ThreadPool"
)
_MEMORY = re.compile(
    r"(?:^|\s)MemoryError\b|Cannot allocate memory|ENOMEM|std::bad_alloc|out of memory"
    r"|Out of memory|JavaScript heap out of memory|Unable to allocate|memory exhausted"
)
# How shells report a child that died of SIGKILL: dash "Killed", bash "line 1:  42 Killed  cmd".
_KILLED = re.compile(r"^(?:Killed|(?:\S+:\s+)?(?:line \d+:\s+)?\d+\s+Killed\b.*)$")

# What the operation was, when the text says: a reader failing on a root-only file is
# ordinary Unix permissions, not the read-only root.
_READ_TOOLS = re.compile(
    r"^(?:\S*/)?(?:cat|head|tail|less|more|grep|egrep|fgrep|ls|find|du|wc|sort|uniq|diff"
    r"|cmp|stat|od|xxd|hexdump|md5sum|sha\d+sum|file|strings|tac|nl|cut|awk|sed|python3?"
    r"|source|\.)(?:: |\[\d+\]: )(?!cannot create|cannot remove|couldn't edit|couldn't open "
    r"temporary)"
)
_READ_INTENT = re.compile(
    r"can't open file|cannot open directory|cannot access|cannot read|can't read"
    r"|cannot open '[^']*' for reading|read_text|read_bytes|listdir|scandir|iterdir"
    r"|opendir|couldn't read"
)
_WRITE_INTENT = re.compile(
    r"cannot create|cannot touch|cannot remove|cannot move|cannot overwrite|cannot make"
    r"|cannot open '[^']*' for writing|error writing|failed to create|cannot link"
    r"|couldn't edit|couldn't open temporary|write_text|write_bytes|makedirs|mkdir|touch"
    r"|copyfile|copy2|copytree|rename|replace|symlink|unlink|rmtree|\bchmod\b|utime"
    r"|Could not install packages|mkstemp|NamedTemporaryFile"
)
_OPEN_CALL = re.compile(r"\bopen\((?P<args>[^()\n]*)\)?")
_MODE_ARGUMENT = re.compile(r"['\"](?P<mode>[rwaxbt+]{1,4})['\"]")
# Frames of a Python traceback ("  File ..., line N, in write_text") that say what the
# failing call was for.
_WRITE_FRAMES = re.compile(
    r", in (?:write_text|write_bytes|mkdir|makedirs|touch|copyfile|copy2?|copytree|move"
    r"|rename|replace|symlink_to|hardlink_to|unlink|rmtree|_mkstemp_inner|mkstemp|mkdtemp"
    r"|NamedTemporaryFile|TemporaryFile|chmod|utime|savetxt|to_csv|dump)\b"
)
_READ_FRAMES = re.compile(
    r", in (?:read_text|read_bytes|listdir|scandir|iterdir|walk|glob|rglob|load|loadtxt"
    r"|read_csv|stat|exists)\b"
)

# Where the attempted address or name is, in the messages common tools print.
_ADDRESS_PATTERNS = (
    re.compile(r"/dev/(?:tcp|udp)/(?P<host>[^/\s:]+)/(?P<port>\d+)"),
    re.compile(r"host='(?P<host>[^']+)', port=(?P<port>\d+)"),
    re.compile(r"[Cc]onnect(?:ing)? to (?P<host>[\w.\-:\[\]]+) port (?P<port>\d+)"),
    re.compile(r"dial (?:tcp|udp)\d? (?P<host>[\w.\-]+|\[[\w:]+\]):(?P<port>\d+)"),
    re.compile(r"connect E[A-Z]+ (?P<host>[\w.\-]+|\[[\w:]+\]):(?P<port>\d+)"),
    re.compile(
        r"(?P<scheme>https?|wss?|ftp)://(?:[^@/\s'\"]*@)?(?P<host>\[[\w:]+\]|[\w.\-]+)"
        r"(?::(?P<port>\d+))?"
    ),
    re.compile(r"\(\s*['\"](?P<host>[\w.\-:]+)['\"]\s*,\s*(?P<port>\d+)\s*[,)]"),
)
_NAME_PATTERNS = (
    re.compile(r"Could not resolve (?:host|proxy): (?P<host>[\w.\-]+)"),
    re.compile(r"getaddrinfo E[A-Z_]+ (?P<host>[\w.\-]+)"),
    re.compile(r"lookup (?P<host>[\w.\-]+) on"),
    re.compile(r"Resolving (?P<host>[\w.\-]+)"),
    re.compile(r"unable to resolve host(?: address)? ['\u2018\"]?(?P<host>[\w.\-]+)"),
    re.compile(r"(?:gethostbyname|getaddrinfo|create_connection)\(\s*['\"](?P<host>[\w.\-]+)"),
    re.compile(r"host='(?P<host>[^']+)'"),
    re.compile(r"(?:https?|wss?|ftp)://(?:[^@/\s'\"]*@)?(?P<host>[\w.\-]+)"),
)
_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443, "ftp": 21}
_LOOPBACK = re.compile(r"^(?:127\.|localhost$|::1$|\[::1\]$|0\.0\.0\.0$)")

_PATH_PATTERNS = (
    re.compile(r"'(?P<path>[^']+)'\s*->\s*'(?P<dest>[^']+)'"),
    re.compile(r"\[Errno \d+\] [^:]+: '(?P<path>[^']+)'"),
    re.compile(r"[\u2018'\"](?P<path>/[^\u2019'\"]*)[\u2019'\"]"),
    re.compile(r"(?:^|[\s(])(?P<path>/[^\s:'\"()]+):"),
    re.compile(r"cannot create (?P<path>[^\s:]+):"),
    re.compile(
        r"[\u2018'\"](?P<path>[^\u2019'\"/][^\u2019'\"]*)[\u2019'\"]: "
        r"(?:Permission denied|Read-only)"
    ),
)
_TRACEBACK_START = "Traceback (most recent call last):"


# ---------------------------------------------------------------- helpers


def _tail(data: bytes) -> str:
    return data[-SCAN_BYTES:].decode("utf-8", "replace")


def _lines(outcome: ExecOutcome) -> list[str]:
    text = _tail(outcome.stderr)
    if outcome.exit_code != 0 or outcome.timed_out:
        # A failed command may have printed its error to stdout (`2>&1`, pip's log).
        text = _tail(outcome.stdout) + "\n" + text
    return [line.rstrip() for line in text.splitlines() if line.strip()]


def _context(lines: Sequence[str], index: int) -> str:
    """The Python traceback (or the few lines) that led up to line `index`."""
    start = max(0, index - _TRACEBACK_WINDOW)
    for back in range(index, start - 1, -1):
        if lines[back].startswith(_TRACEBACK_START):
            start = back
            break
    else:
        start = max(0, index - 2)
    return "\n".join(lines[start : index + 1])


def _under(path: str, roots: Sequence[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def _path_in(line: str, cwd: str) -> str | None:
    for pattern in _PATH_PATTERNS:
        match = pattern.search(line)
        if match:
            path = match.groupdict().get("dest") or match["path"]
            return posixpath.normpath(posixpath.join(cwd, path))
    return None


def _address(texts: Sequence[str]) -> str | None:
    """host:port of a non-loopback destination named in the texts, first found."""
    for text in texts:
        for pattern in _ADDRESS_PATTERNS:
            for match in pattern.finditer(text):
                host = match["host"]
                if _LOOPBACK.match(host):
                    continue
                port = match.groupdict().get("port")
                if not port:
                    scheme = match.groupdict().get("scheme")
                    port = str(_DEFAULT_PORTS.get(scheme or "", "")) or None
                if ":" in host and not host.startswith("["):
                    host = f"[{host}]"
                return f"{host}:{port}" if port else host
    return None


def _name(texts: Sequence[str]) -> str | None:
    for text in texts:
        for pattern in _NAME_PATTERNS:
            for match in pattern.finditer(text):
                host = match["host"]
                if not _LOOPBACK.match(host) and not re.fullmatch(r"[\d.]+", host):
                    return host
    return None


def _python_source_mode(context: str) -> str | None:
    """The mode of the first `open(...)` a traceback's source lines show ('r' when the
    call gives none), or None if no call can be read (none shown, or a mode variable)."""
    for match in _OPEN_CALL.finditer(context):
        arguments = match["args"]
        mode = _MODE_ARGUMENT.search(arguments)
        if mode:
            return mode["mode"]
        if "," not in arguments and "mode" not in arguments:
            return "r"
    return None


def _write_intent(line: str, context: str) -> bool | None:
    """True for evidently a write, False for evidently a read, None when the text can't say."""
    if _WRITE_INTENT.search(line):
        return True
    if _READ_TOOLS.search(line) or _READ_INTENT.search(line):
        return False
    if _WRITE_FRAMES.search(context):
        return True
    if _READ_FRAMES.search(context):
        return False
    mode = _python_source_mode(context)
    if mode is not None:
        return any(flag in mode for flag in "wax+")
    return None


_PRIVILEGED_OPERATIONS = (
    (re.compile(r"set(?:e|re|res)?[ug]id|setgroups|\bsu\b|Authentication failure"), "change user"),
    (re.compile(r"sudo"), "sudo"),
    (re.compile(r"\bmount\b|\bumount"), "mount a filesystem"),
    (re.compile(r"ptrace|strace|gdb|process_vm"), "ptrace another process"),
    (
        re.compile(r"clock_settime|settimeofday|set date|date -s|adjtimex?\b|\bstime\b"),
        "set the system clock",
    ),
    (re.compile(r"hostname|sethostname|setdomainname"), "set the hostname"),
    (re.compile(r"chown|ownership|lchown"), "change file ownership"),
    (re.compile(r"chroot|pivot_root"), "chroot"),
    (re.compile(r"SOCK_RAW|SOCK_PACKET|raw socket|\bping\b|socket\.py"), "open a raw socket"),
    (re.compile(r"setrlimit|ulimit|error setting limit|prlimit"), "raise a resource limit"),
    (re.compile(r"sysctl|/proc/sys"), "change a kernel setting (sysctl)"),
    (re.compile(r"\bnice\b|niceness|setpriority|sched_set"), "raise scheduling priority"),
    (re.compile(r"capset|capabilit|setcap|CAP_"), "gain a capability"),
    (re.compile(r"unshare|setns"), "enter or create a namespace"),
    (
        re.compile(r"\bmknod|\biopl|ioperm|\breboot|kexec|swapon|init_module|\bbpf\b"),
        "a privileged syscall",
    ),
)


_UNKNOWN_OPERATION = "a privileged operation"


def _privileged_operation(texts: Sequence[str]) -> str:
    for text in texts:
        for pattern, what in _PRIVILEGED_OPERATIONS:
            if pattern.search(text):
                return what
    return _UNKNOWN_OPERATION


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
        (_UNREACHABLE, _address, "{}", "an outbound connection", f"egress={policy.egress}"),
        (_DNS, _name, "dns:{}", "a DNS lookup", f"egress={policy.egress} (no resolver)"),
    )
    for pattern, find, attempted, unnamed, because in network:
        if pattern.search(line):
            target = find([line, _context(lines, index), argv_text])
            yield _Found(
                "network",
                attempted.format(target) if target else unnamed,
                because,
                line,
                specific=target is not None,
            )
            return
    if _ENOSPC.search(line):
        path = _path_in(line, cwd)
        scratch = f"scratch={policy.scratch}" if policy.scratch else "scratch size"
        yield _Found(
            "disk",
            f"write {path}" if path else "write past the scratch size",
            f"{scratch} per writable volume ({','.join(policy.writable)})",
            line,
            specific=path is not None,
        )
        return
    if _FORK_REFUSED.search(line) or (
        _EAGAIN.search(line)
        and (_FORK_CONTEXT.search(_context(lines, index)) or _FORK_CONTEXT.search(argv_text))
    ):
        what = "start a thread" if "thread" in line else "start a process"
        cap = f"processes={policy.processes}" if policy.processes else "process limit"
        yield _Found("processes", what, cap, line)
        return
    if _MEMORY.search(line):
        size = re.search(r"allocate (\d[\d.]* ?[KMGTP]i?B)", line)
        memory = f"memory={policy.memory}" if policy.memory else "memory limit"
        yield _Found(
            "memory",
            f"allocate {size[1]}" if size else "allocate memory",
            memory,
            line,
        )
        return
    if _PRIVILEGE_WORDS.search(line):
        what = _privileged_operation([line, _context(lines, index)])
        yield _Found("privilege", what, _privilege_because(policy), line)
        return
    erofs = _EROFS.search(line)
    eacces = _EACCES.search(line)
    eperm = _EPERM.search(line)
    if not (erofs or eacces or eperm):
        return
    context = _context(lines, index)
    path = _path_in(line, cwd)
    privileged = _privileged_operation([line, context, argv_text])
    if path is not None and path.startswith(("/proc/sys", "/sys/")):
        yield _Found(
            "privilege", "change a kernel setting (sysctl)", _privilege_because(policy), line
        )
        return
    if eperm and not erofs and (privileged != _UNKNOWN_OPERATION or path is None):
        # EPERM is a missing capability or uid 0: setuid, mount, chown, the clock, ...
        yield _Found("privilege", privileged, _privilege_because(policy), line)
        return
    if path is not None and _under(path, policy.writable):
        # Inside the writable places a refusal is ordinary (a file's own mode, an exec of
        # a file without +x), unless those places are mounted noexec by policy.
        if eperm:
            yield _Found("privilege", privileged, _privilege_because(policy), line)
        elif eacces and policy.scratch_noexec and _is_exec_refusal(line, outcome):
            yield _Found("filesystem", f"exec {path}", "scratch=noexec", line)
        return
    if path is not None:
        if erofs or _write_intent(line, context) is not False:
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
    what = _privileged_operation([line])
    if what != _UNKNOWN_OPERATION:
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
        shell = next((line for line in lines if _KILLED.match(line.strip())), None)
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
