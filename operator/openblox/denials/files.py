"""What a guest's error text says about a file: the refusals a read-only root and a noexec
scratch cause, in the words tools really print them, and readers that pull out the path,
whether it was written, and whether it was run. Pure: no I/O. refusals.py decides which of
these make a denial.

No pattern here backtracks over what it has read: no nested or adjacent unbounded
repeats that could match the same text (possessive `*+` where they would), so a
hostile line costs time in proportion to its length, which outcome.lines bounds
(tests/unit/test_denial_refusals.py tries each pattern on hostile lines).
"""

from __future__ import annotations

import itertools
import posixpath
import re
from collections.abc import Sequence

# EROFS as C, Python, Node, Go ("read-only file system") and Rust (ReadOnlyFilesystem) say it.
EROFS = re.compile(r"[Rr]ead-only file system|\bEROFS\b|ReadOnlyFilesystem")
# EACCES. Go's lowercase words count only after an operation and a path, which is how Go
# reports an error of the filesystem (`open /etc/x: permission denied`); elsewhere they are
# too common in a program's own messages ("permission denied for table invoices").
EACCES = re.compile(
    r"Permission denied|\bEACCES\b|os error 13\b"
    r"|\b(?:open|mkdir|remove|rename|link|symlink|chmod|chown|truncate|fork/exec|unlinkat"
    r"|openat|mkdirat) [^\s:]+: permission denied"
)
# A missing file or directory. Creating one outside the writable places never succeeds,
# parent or not, and Node's recursive mkdir reports a read-only root this way.
ENOENT = re.compile(r"No such file or directory|\bENOENT\b|no such file or directory")
# The dynamic loader refused to map a library or program from a noexec mount.
MAP_REFUSED = re.compile(r"failed to map segment from shared object")
# A tool or library saying in its own words that it cannot write somewhere.
UNWRITABLE = re.compile(
    r"\b(?:is not|isn't|not) (?:a )?writ(?:e)?able\b|\bno write permission"
    r"|\btrying to write in\b|\b(?:cannot|can't|could not|unable to) write (?:to|in)\b"
)
# pip's words for a system site-packages it cannot write, which it never names.
SITE_PACKAGES = re.compile(r"normal site-packages is not writ(?:e)?able")
# SQLite cannot open or write a database file.
SQLITE = re.compile(r"unable to open database file|attempt to write a readonly database")
# Words saying the refused operation was running a program.
EXEC_WORDS = re.compile(
    r"\bexec(?:ve|vp)?\b|fork/exec|\bspawn(?:Sync)?\b|Can't exec|could not execute"
    r"|cannot execute|never executed|failed to run command|not set as executable"
)
# Python frames of a call that runs a program.
EXEC_FRAMES = re.compile(r"_execute_child|, in (?:exec[lv]p?e?|spawn[lv]p?e?|posix_spawn)\b")
# How a shell (or make, env, xargs) reports a program it found but could not run: dash
# says "cannot create" for a refused redirect, so this shape is an exec. bash is left out
# (SHELL_SHAPE): it words a refused redirect the same way.
EXEC_SHAPE = re.compile(
    r"^(?:\S*/)?(?:sh|dash|make(?:\[\d+\])?|env|xargs)(?:: \d+)?: "
    r"[\u2018'\"]?(?P<path>[^:\s\u2018\u2019'\"]+)[\u2019'\"]?: Permission denied$"
)
_SHELL_SHAPE = re.compile(r"^(?:\S*/)?bash(?:: line \d+)?: (?P<path>[^:\s]+): Permission denied$")
_SHELLS = {"sh", "bash", "dash", "zsh", "ksh", "ash", "busybox"}
_SCRIPTS = 4  # shell scripts given with -c that are read, at the most
_FIND_EXEC = {"-exec", "-execdir", "-ok", "-okdir"}
# A literal program handed to a call that runs it: os.execv('/tmp/tool', ...),
# subprocess.run(['./tool']), execFileSync('/tmp/tool'), system('/tmp/tool').
_EXEC_CALL = re.compile(
    r"\b(?:exec[lv]p?e?|spawn\w*|Popen|run|call|check_call|check_output|execFile\w*"
    r"|system)\(\s*+\[?\s*+['\"](?P<path>[^'\"\s]+)"
)
_CD_PREFIX = re.compile(r"^\s*cd\s+(?P<dir>/[^\s;&|]*)\s*(?:&&|;)")
_DIRECTORY_FLAG = re.compile(r"(?:^|\s)(?:-C\s*|--directory[= ])(?P<dir>/[^\s;&|]+)")
_SQLITE_CONNECT = re.compile(r"connect\(\s*['\"](?:file:)?(?P<path>[^'\"?]+)")

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
    r"|Could not install packages|mkstemp|NamedTemporaryFile|could not create|could not lock"
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

# Where the path is, in the messages common tools print; the first that matches wins.
_PATH_PATTERNS = (
    EXEC_SHAPE,
    _SHELL_SHAPE,
    re.compile(r"'(?P<path>[^']+)'\s*->\s*'(?P<dest>[^']+)'"),
    re.compile(r"\[Errno \d+\] [^:]+: '(?P<path>[^']+)'"),
    re.compile(r"[\u2018'\"](?P<path>/[^\u2018\u2019'\"]*+)[\u2019'\"]"),
    re.compile(r"(?:^|[\s(])(?P<path>/[^\s:'\"()]+):"),
    re.compile(r"cannot create (?P<path>[^\s:]+):"),
    re.compile(r"\bspawn(?:Sync)? (?P<path>\S+) E[A-Z]+"),
    re.compile(r"^(?:\S*/)?tar: (?P<path>[^:\s]+): Cannot (?:mkdir|open|create|utime)\b"),
    re.compile(
        r"[\u2018'\"](?P<path>[^\u2019'\"/][^\u2019'\"]*)[\u2019'\"]: "
        r"(?:Permission denied|Read-only)"
    ),
    # Rust and cargo quote a path in backticks; one without a slash is code, not a path.
    re.compile(r"`(?P<path>[^`\s/]*+/[^`\s]*+)[^`]*+`"),
    re.compile(r"(?:^|\s)(?P<path>/[^\s:'\"()]+)$"),
)
# Paths a tool names in its own words: quoted or in parentheses first, then bare.
_NAMED_PATHS = (
    re.compile(r"[\u2018'\"`(](?P<path>/[^\u2018\u2019'\"`()\s]*+)[\u2019'\"`)]"),
    re.compile(r"(?<![\w.:/~-])(?P<path>/[^\s'\"`()\[\]{}<>,;:]*)"),
)
_ARGV_PATH = re.compile(r"(?<![\w.:/~-])(?P<path>/[^\s'\"`()\[\]{}<>,;:]+)")


def is_under(path: str, roots: Sequence[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def resolve(path: str, cwd: str) -> str:
    """The absolute, normal form of a path a message names, relative ones read from cwd."""
    joined = posixpath.normpath(posixpath.join(cwd, path))
    return "/" + joined.lstrip("/")  # normpath keeps a leading "//"


def raw_path_in(line: str) -> str | None:
    """The path a message names, as it names it (relative or not)."""
    for pattern in _PATH_PATTERNS:
        match = pattern.search(line)
        if match:
            return match.groupdict().get("dest") or match["path"]
    return None


def path_in(line: str, cwd: str) -> str | None:
    raw = raw_path_in(line)
    return resolve(raw, cwd) if raw is not None else None


def named_paths(line: str) -> list[str]:
    """Every absolute path a line names, those it quotes or puts in parentheses first."""
    found = [match["path"] for pattern in _NAMED_PATHS for match in pattern.finditer(line)]
    return [path.rstrip(".") or path for path in found]


def argv_paths(argv_text: str) -> list[str]:
    """The absolute paths the command's argv names, first to last, each once."""
    return list(dict.fromkeys(match["path"] for match in _ARGV_PATH.finditer(argv_text)))


def exec_target(argv_text: str, context: str) -> str | None:
    """A program the code hands literally to a call that runs it, from the traceback's
    source lines or the argv."""
    for text in (context, argv_text):
        match = _EXEC_CALL.search(text)
        if match:
            return match["path"]
    return None


def sqlite_database(argv: Sequence[str], argv_text: str, context: str) -> str | None:
    """The database file a command opened: sqlite3's first argument, or a literal
    `connect(...)` in the traceback's source lines or the argv."""
    for text in (context, argv_text):
        match = _SQLITE_CONNECT.search(text)
        if match:
            return match["path"]
    if argv and posixpath.basename(argv[0]) == "sqlite3":
        return next((arg for arg in argv[1:] if not arg.startswith("-")), None)
    return None


def working_directory(argv: Sequence[str], cwd: str) -> str:
    """Where relative paths in the output start: a shell script's leading `cd /dir &&`, or
    a tool's `-C /dir` (tar, make, git), else the exec's cwd."""
    for argument in argv:
        match = _CD_PREFIX.search(argument)
        if match:
            return match["dir"]
    match = _DIRECTORY_FLAG.search(" ".join(argv))
    return match["dir"] if match else cwd


def at_command_position(name: str, argv: Sequence[str]) -> bool:
    """Whether the argv runs `name` as a program: it is the program, it follows find's
    -exec, or a shell script given with -c has it where a command starts (not after `>`
    or as an argument)."""
    if argv and argv[0] == name:
        return True
    if any(flag in _FIND_EXEC and arg == name for flag, arg in itertools.pairwise(argv)):
        return True
    if not argv or posixpath.basename(argv[0]) not in _SHELLS:
        return False
    command = re.compile(
        r"(?:^|[;&|(`\n]|\$\(|\b(?:then|do|else|exec|env|nohup|xargs)\s)\s*"
        + re.escape(name)
        + r"(?=$|[\s;&|)`])"
    )
    scripts = [arg for flag, arg in itertools.pairwise(argv) if re.fullmatch(r"-\w*c", flag)]
    return any(command.search(script) for script in scripts[:_SCRIPTS])


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


def _argv_intent(path: str, argv_text: str) -> bool | None:
    """What the argv does to `path`, where it says: opens it with a mode (Python's
    open(path, 'w'), Perl's open(F, '>', path)) or redirects into it. Only the built-in
    open: another module's (shelve.open, dbm.open) creates by default."""
    quoted = rf"['\"]{re.escape(path)}['\"]"
    python = re.search(
        rf"(?<![\w.])open\(\s*{quoted}\s*(?:,\s*['\"](?P<mode>[rwaxbt+]{{1,4}})['\"])?",
        argv_text,
    )
    if python:
        return any(flag in (python["mode"] or "r") for flag in "wax+")
    perl = re.search(rf"['\"](?P<mode>\+?[<>]{{1,2}})['\"]\s*,\s*{quoted}", argv_text)
    if perl:
        return ">" in perl["mode"] or "+" in perl["mode"]
    if re.search(rf">>?\s*{re.escape(path)}(?![\w/.-])", argv_text):
        return True
    return None


def write_intent(
    line: str, context: str, path: str | None = None, argv_text: str = ""
) -> bool | None:
    """True for evidently a write, False for evidently a read, None when the text can't
    say. The line's words first, then the traceback's frames and source, then what the
    argv does to the path."""
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
    return _argv_intent(path, argv_text) if path else None
