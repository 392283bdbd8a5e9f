"""What a guest's error text says it tried: the patterns of the errors a sandbox's policy
causes, and readers that pull an address, a host name or a privileged operation out of a
line or its traceback (files.py reads paths and what was done to them). Pure: no I/O. The
classifier (classify.py) decides which of these make a denial.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_TRACEBACK_WINDOW = 60
# The end of a long traceback is read: the frames nearest the error say what failed.
_CONTEXT_CHARS = 8192

UNREACHABLE = re.compile(
    r"Network is unreachable|No route to host|ENETUNREACH|EHOSTUNREACH|network is unreachable"
    r"|no route to host"
)
DNS_FAILURE = re.compile(
    r"Temporary failure in name resolution|Name or service not known"
    r"|No address associated with hostname|Could not resolve host|Could not resolve proxy"
    r"|getaddrinfo (?:EAI_AGAIN|ENOTFOUND)|unable to resolve host|Name does not resolve"
    r"|lookup \S+ on \S+: (?:dial|read|no such host|server misbehaving)"
    r"|Resolving \S+ \S*\s*failed|Temporary failure resolving|nodename nor servname"
    r"|\[Errno -[235]\]"
)
EPERM = re.compile(r"Operation not permitted|EPERM\b")
PRIVILEGE_WORDS = re.compile(
    r"must be superuser|must be root|you must be root|Authentication failure"
    r"|not in the sudoers|sudo: (?:command )?not found|sudo: not found"
    r"|\bsu: .{0,200}?(?:failure|denied)"
    r"|cannot set niceness|setting key .{0,200}?(?:Invalid argument|Permission denied|Read-only)"
    r"|permission denied on key|Only root can|requires root|need to be root"
)
ENOSPC = re.compile(r"No space left on device|ENOSPC|Disk quota exceeded|EDQUOT")
FORK_REFUSED = re.compile(
    r"fork: (?:retry: )?Resource temporarily unavailable|Cannot fork|can't fork|fork failed"
    r"|can't start new thread|pthread_create failed|fork: Resource temporarily"
    r"|unable to create new native thread|failed to create thread"
)
EAGAIN = re.compile(r"Resource temporarily unavailable|EAGAIN")
FORK_CONTEXT = re.compile(
    r"\bfork\b|_fork_exec|_execute_child|Popen|posix_spawn|\bspawn|start_new_thread"
    r"|\bclone\b|multiprocessing|ProcessPool|ThreadPool"
)
MEMORY_ERROR = re.compile(
    r"(?:^|\s)MemoryError\b|Cannot allocate memory|ENOMEM|std::bad_alloc|out of memory"
    r"|Out of memory|JavaScript heap out of memory|Unable to allocate|memory exhausted"
)
# How shells report a child that died of SIGKILL: dash "Killed", bash "line 1:  42 Killed  cmd".
KILLED = re.compile(r"^(?:Killed|(?:\S+:\s+)?(?:line \d+:\s+)?\d+\s+Killed\b.*)$")

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

_TRACEBACK_START = "Traceback (most recent call last):"


# ---------------------------------------------------------------- readers


def traceback_context(lines: Sequence[str], index: int) -> str:
    """The Python traceback (or the few lines) that led up to line `index`."""
    start = max(0, index - _TRACEBACK_WINDOW)
    for back in range(index, start - 1, -1):
        if lines[back].startswith(_TRACEBACK_START):
            start = back
            break
    else:
        start = max(0, index - 2)
    return "\n".join(lines[start : index + 1])[-_CONTEXT_CHARS:]


def address_in(texts: Sequence[str]) -> str | None:
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


def host_name_in(texts: Sequence[str]) -> str | None:
    for text in texts:
        for pattern in _NAME_PATTERNS:
            for match in pattern.finditer(text):
                host = match["host"]
                if not _LOOPBACK.match(host) and not re.fullmatch(r"[\d.]+", host):
                    return host
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


UNKNOWN_OPERATION = "a privileged operation"


def privileged_operation(texts: Sequence[str]) -> str:
    for text in texts:
        for pattern, what in _PRIVILEGED_OPERATIONS:
            if pattern.search(text):
                return what
    return UNKNOWN_OPERATION
