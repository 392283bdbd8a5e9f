"""The filesystem rules on the words real tools use: a program run from a noexec scratch,
and a library that cannot write outside the writable places and says so its own way
(operator/openblox/denials/refusals.py). The texts are the tools' own, as the transcript
corpus (tests/unit/denial_transcripts) recorded them."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import replace
from types import ModuleType

import pytest

from openblox.denials import classify, evidence, files, refusals
from openblox.denials import outcome as outcome_module
from tests.unit.test_denials import POLICY, TRACEBACK, denials, only, outcome

NOEXEC = replace(POLICY, scratch_noexec=True)

SUBPROCESS = (
    TRACEBACK + '  File "<string>", line 1, in <module>\n'
    '  File "/usr/lib/python3.11/subprocess.py", line 1901, in _execute_child\n'
    "    raise child_exception_type(errno_num, err_msg, err_filename)\n"
    "PermissionError: [Errno 13] Permission denied: '/tmp/tool'\n"
)

# (stderr, exit status, argv, what the record says was run)
RUN_FROM_SCRATCH = [
    (SUBPROCESS, 1, ("python3", "-c", "subprocess.run(['/tmp/tool'])"), "exec /tmp/tool"),
    (
        "fork/exec /tmp/go-build7/b001/exe/main: permission denied\n",
        1,
        ("go", "run", "main.go"),
        "exec /tmp/go-build7/b001/exe/main",
    ),
    ("Error: spawnSync /tmp/tool EACCES\n", 1, ("node", "-e", "x"), "exec /tmp/tool"),
    ("sh: 1: jest: Permission denied\n", 126, ("npm", "test"), "exec jest (found on PATH)"),
    (
        "error: could not execute process `target/debug/app` (never executed)\n\n"
        "Caused by:\n  Permission denied (os error 13)\n",
        101,
        ("cargo", "run"),
        "exec /workspace/target/debug/app",
    ),
    (
        "bash: line 1: ./solver: Permission denied\n",
        0,
        ("bash", "-c", "./solver --input data.txt > out.txt; echo $?"),
        "exec /workspace/solver",
    ),
    ("make: ./configure: Permission denied\n", 2, ("make",), "exec /workspace/configure"),
    (
        "sh: 1: /tmp/tool: Permission denied\n",
        0,
        ("python3", "-c", "os.system('/tmp/tool')"),
        "exec /tmp/tool",
    ),
    (
        "hint: The '.git/hooks/pre-commit' hook was ignored because it's not set as executable.\n",
        0,
        ("git", "commit", "-m", "x"),
        "exec /workspace/.git/hooks/pre-commit",
    ),
    (
        TRACEBACK + "PermissionError: [Errno 13] Permission denied\n",
        1,
        ("python3", "-c", "import os; os.execv('/tmp/tool', ['tool'])"),
        "exec /tmp/tool",
    ),
    (
        "find: \u2018/tmp/check\u2019: Permission denied\n",
        0,
        ("find", "/workspace", "-name", "*.txt", "-exec", "/tmp/check", "{}", ";"),
        "exec /tmp/check",
    ),
    (
        "ImportError: /workspace/lib/fast.so: failed to map segment from shared object\n",
        1,
        ("python3", "-c", "import fast"),
        "load /workspace/lib/fast.so as code",
    ),
    (
        "tool failed: -1\n",
        13,
        ("perl", "-e", "system('/tmp/tool') == 0 or die \"tool failed: $?\""),
        "exec /tmp/tool",
    ),
]


@pytest.mark.parametrize(("stderr", "exit_code", "argv", "attempted"), RUN_FROM_SCRATCH)
def test_a_program_run_from_noexec_scratch_is_a_filesystem_denial(
    stderr: str, exit_code: int, argv: tuple[str, ...], attempted: str
) -> None:
    seen = outcome(stderr, exit_code=exit_code, argv=argv)
    assert seen.may_be_refused_exec(), "the client would not read the mounts"
    record = only(seen, NOEXEC)
    assert (record["denied"], record["attempted"], record["because"]) == (
        "filesystem",
        attempted,
        "scratch=noexec",
    )
    # Where scratch is not noexec, the same refusal is the file's own mode.
    assert denials(seen) == []


def test_refusals_in_scratch_that_are_not_a_program_run_stay_ordinary() -> None:
    redirect = outcome(
        "bash: line 1: /tmp/out.txt: Permission denied\n",
        argv=("bash", "-c", "echo b > /tmp/out.txt"),
    )
    assert denials(redirect, NOEXEC) == []
    own_mode = outcome("PermissionError: [Errno 13] Permission denied: '/workspace/out.csv'\n")
    assert denials(own_mode, NOEXEC) == []
    interpreter = outcome("deploy: permission denied for user sandbox\n", argv=("sh", "/tmp/x"))
    assert denials(interpreter, NOEXEC) == []
    # A word in the path is not the operation.
    named = outcome("PermissionError: [Errno 13] Permission denied: '/workspace/exec/a.csv'\n")
    assert denials(named, NOEXEC) == []


def test_a_program_in_the_image_refused_for_its_own_mode_is_not_a_write() -> None:
    text = "sh: 1: /usr/local/bin/tool: Permission denied\n"
    assert denials(outcome(text, exit_code=126), NOEXEC) == []


def test_the_client_reads_the_mounts_for_every_wording_of_a_refused_exec() -> None:
    for text in (
        "fork/exec /tmp/x: permission denied",
        "Error: spawn ./tool EACCES",
        "  Permission denied (os error 13)",
        "hint: The '.git/hooks/x' hook was ignored because it's not set as executable.",
    ):
        assert outcome(text + "\n").may_be_refused_exec(), text
    assert outcome(exit_code=126).may_be_refused_exec()
    assert not outcome("ValueError: bad\n").may_be_refused_exec()
    # A command that succeeded had its stdout read as data, not as an error.
    assert not outcome(stdout="Permission denied\n", exit_code=0).may_be_refused_exec()


OWN_WORDS = [
    (
        "WARNING: The directory '/home/sandbox/.cache/pip' or its parent directory is not "
        "owned or is not writable by the current user. The cache has been disabled.",
        (),
        "write /home/sandbox/.cache/pip",
    ),
    (
        "Matplotlib created a temporary config/cache directory at /tmp/matplotlib-x because "
        "the default path (/root/.config/matplotlib) is not a writable directory; it is "
        "highly recommended to set the MPLCONFIGDIR environment variable",
        (),
        "write /root/.config/matplotlib",
    ),
    (
        "There was a problem when trying to write in your cache folder "
        "(/home/sandbox/.cache/huggingface/hub).",
        (),
        "write /home/sandbox/.cache/huggingface/hub",
    ),
    (
        'warning Skipping preferred cache folder "/home/sandbox/.cache/yarn" because it is '
        "not writable.",
        (),
        "write /home/sandbox/.cache/yarn",
    ),
    (
        'Error: unable to open database "/var/lib/app.db": unable to open database file',
        ("sqlite3", "/var/lib/app.db", "create table t (x)"),
        "write /var/lib/app.db",
    ),
    (
        "sqlite3.OperationalError: attempt to write a readonly database",
        ("python3", "-c", "db = sqlite3.connect('/opt/app/data.db'); db.execute('insert')"),
        "write /opt/app/data.db",
    ),
    (
        "npm error enoent ENOENT: no such file or directory, mkdir '/usr/lib/node_modules/x'",
        ("npm", "install", "--global", "./x.tgz"),
        "write /usr/lib/node_modules/x",
    ),
    (
        "2026/12/05 21:55:24 init cache: mkdir /var/lib/svc: read-only file system",
        ("svc",),
        "write /var/lib/svc",
    ),
    (
        "fatal: could not create work tree dir 'app': Read-only file system",
        ("sh", "-c", "cd /srv && git clone /workspace/src.git app"),
        "write /srv/app",
    ),
    (
        "tar: app: Cannot mkdir: Read-only file system",
        ("tar", "-xf", "app.tar", "-C", "/opt"),
        "write /opt/app",
    ),
    (
        "FileNotFoundError: [Errno 2] No such file or directory: '/data/model.pkl'",
        ("python3", "-c", "pickle.dump(model, open('/data/model.pkl', 'wb'))"),
        "write /data/model.pkl",
    ),
    (
        "cannot write config: Permission denied at -e line 1.",
        ("perl", "-e", "open(my $fh, '>', '/etc/app.conf') or die \"cannot write config: $!\""),
        "write /etc/app.conf",
    ),
]


@pytest.mark.parametrize(("stderr", "argv", "attempted"), OWN_WORDS)
def test_a_tool_that_cannot_write_outside_the_writable_places_is_a_filesystem_denial(
    stderr: str, argv: tuple[str, ...], attempted: str
) -> None:
    record = only(outcome(stderr + "\n", argv=argv, exit_code=0))
    assert (record["denied"], record["attempted"]) == ("filesystem", attempted)
    assert record["because"].startswith("readOnlyRootFilesystem=true")


def test_the_same_words_about_a_writable_place_are_ordinary() -> None:
    for text, argv in (
        ("<string>:4: UserWarning: /workspace/.cache/app is not writable, caching disabled", ()),
        (
            "sqlite3.OperationalError: unable to open database file",
            ("python3", "-c", "sqlite3.connect('/workspace/data/app.db')"),
        ),
        (
            "sqlite3.OperationalError: attempt to write a readonly database",
            ("python3", "-c", "sqlite3.connect('file:/workspace/app.db?mode=ro', uri=True)"),
        ),
        ("Error: ENOENT: no such file or directory, mkdir '/workspace/a/b'", ()),
        # A read of a missing file is no write, wherever it is.
        (
            "FileNotFoundError: [Errno 2] No such file or directory: '/data/input.csv'",
            ("python3", "-c", "print(open('/data/input.csv').read())"),
        ),
    ):
        assert denials(outcome(text + "\n", argv=argv)) == [], text


def test_quoted_code_and_assertions_are_not_read_as_errors() -> None:
    text = (
        TRACEBACK + '  File "/workspace/test_store.py", line 11, in test_save\n'
        "    self.assertEqual(error, \"[Errno 30] Read-only file system: '/data/out.csv'\")\n"
        "AssertionError: False != \"[Errno 30] Read-only file system: '/data/out.csv'\"\n"
    )
    assert denials(outcome(text)) == []


def test_what_the_argv_opens_tells_a_read_from_a_write() -> None:
    text = TRACEBACK + "PermissionError: [Errno 13] Permission denied: '/etc/shadow'\n"
    read = ("python3", "-c", "print(open('/etc/shadow').read())")
    assert denials(outcome(text, argv=read)) == []
    write = ("python3", "-c", "open('/etc/shadow', 'a').write('x')")
    assert only(outcome(text, argv=write))["attempted"] == "write /etc/shadow"
    # shelve.open, like dbm.open, creates: it is not the built-in open's read.
    shelve = TRACEBACK + "_dbm.error: [Errno 13] Permission denied: '/var/cache/state'\n"
    create = ("python3", "-c", "with shelve.open('/var/cache/state') as db: db['n'] = 1")
    assert only(outcome(shelve, argv=create))["attempted"] == "write /var/cache/state"


def test_app_level_permission_words_are_ordinary() -> None:
    for text in (
        "Error: permission denied: user alice may not delete invoice 42",
        "ERROR:  permission denied for table invoices",
        "urllib.error.HTTPError: HTTP Error 403: permission denied: /admin/settings",
        "usage: sync [-h] [--read-only] target",
    ):
        assert denials(outcome(text + "\n"), NOEXEC) == [], text


HOSTILE = [
    b"sh: 1: /tmp/x: Permission denied\n" * 40_000,
    (b"/" + b"a/" * 1000 + b": Operation not permitted\n") * 500,
    b"error: `a/b`\nCaused by:\n  Permission denied (os error 13)\n" * 20_000,
    b"'/a' is not writable " * 50_000,
    b"`" * (1 << 20) + b" Permission denied",
]


def test_hostile_output_is_read_in_bounded_time() -> None:
    """However much the guest prints, the classifier reads a bounded part of it."""
    argv = ("sh", "-c", "x; " * 100_000)
    for text in HOSTILE:
        seen = replace(outcome(exit_code=126, argv=argv), stdout=text, stderr=text)
        started = time.monotonic()
        denials(seen, NOEXEC)
        assert time.monotonic() - started < 3, text[:40]


def _patterns(value: object) -> Iterator[re.Pattern[str] | re.Pattern[bytes]]:
    if isinstance(value, re.Pattern):
        yield value
    elif isinstance(value, tuple):
        for item in value:
            yield from _patterns(item)


MODULES: tuple[ModuleType, ...] = (classify, evidence, files, outcome_module, refusals)
# Repeats of what the patterns look for, with the closing part they wait for left out: a
# pattern that backtracks takes seconds on one of these, 2 KiB long (outcome.LINE_CHARS).
UNITS = ("`a/", "/", "\u2018/", "'/", "run(", "\t", " ", "su: ", "setting key ", "a/", ": ")


def test_no_pattern_backtracks_on_a_hostile_line() -> None:
    lines = [(unit * 2048)[:2048] for unit in UNITS]
    lines += [(head + tail * 2048)[:2048] for head in UNITS for tail in UNITS]
    patterns = {id(p): p for module in MODULES for v in vars(module).values() for p in _patterns(v)}
    assert len(patterns) > 50
    slow = []
    for pattern in patterns.values():
        for line in lines:
            text = line.encode() if isinstance(pattern.pattern, bytes) else line
            started = time.monotonic()
            pattern.search(text)  # type: ignore[arg-type]
            if time.monotonic() - started > 0.25:
                slow.append((pattern.pattern, line[:20]))
    assert slow == []
