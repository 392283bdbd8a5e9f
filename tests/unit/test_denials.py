"""The denial record and classifier, on the error texts gVisor and the sandbox image really
produce (collected from a code-exec sandbox; see docs/denials.md)."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from openblox.builders.conditions import Observation
from openblox.builders.status import build_status
from openblox.denials import (
    CATEGORIES,
    SCHEMA,
    Denial,
    ExecOutcome,
    Policy,
    admission_denial,
    classify_exec,
    lifetime_denial,
    merge_recent,
    pod_denial,
    scratch_mounted_noexec,
)
from openblox.lifetime import compute_expiry, effective_lifetime
from tests.unit.factories import CREATED, default_profile, make_sandbox

NOW = datetime(2026, 11, 30, 17, 0, 0, tzinfo=UTC)
POLICY = Policy(profile="code-exec", memory="512Mi", scratch="128Mi")
SCHEMA_FILE = Path(__file__).parents[2] / "docs" / "denials.schema.json"

TRACEBACK = "Traceback (most recent call last):\n"


def outcome(
    stderr: str = "",
    *,
    stdout: str = "",
    exit_code: int = 1,
    timed_out: bool = False,
    truncated: bool = False,
    signal: int | None = 0,
    argv: tuple[str, ...] = (),
    cwd: str | None = None,
) -> ExecOutcome:
    return ExecOutcome(
        stdout=stdout.encode(),
        stderr=stderr.encode(),
        exit_code=exit_code,
        timed_out=timed_out,
        truncated=truncated,
        timeout=60,
        output_limit=1 << 20,
        signal=signal,
        argv=argv,
        cwd=cwd,
    )


def denials(result: ExecOutcome, policy: Policy = POLICY) -> list[dict[str, Any]]:
    return [d.to_dict() for d in classify_exec(result, policy, NOW)]


def only(result: ExecOutcome, policy: Policy = POLICY) -> dict[str, Any]:
    found = denials(result, policy)
    assert len(found) == 1, found
    return found[0]


# ---------------------------------------------------------------- the record


def validate(record: dict[str, Any]) -> None:
    """The subset of JSON Schema the schema file uses, checked without a library."""
    schema = json.loads(SCHEMA_FILE.read_text())
    assert set(schema["required"]) <= set(record)
    assert set(record) <= set(schema["properties"]) or schema["additionalProperties"]
    for key, value in record.items():
        rule = schema["properties"][key]
        if "const" in rule:
            assert value == rule["const"]
        if "enum" in rule:
            assert value in rule["enum"]
        if rule.get("type") == "string":
            assert isinstance(value, str)
            assert len(value) <= rule.get("maxLength", len(value))
            assert len(value) >= rule.get("minLength", 0)
            if "pattern" in rule:
                assert re.fullmatch(rule["pattern"], value), (key, value)
        if rule.get("type") == "boolean":
            assert isinstance(value, bool)


def test_schema_file_names_the_same_version_and_categories() -> None:
    schema = json.loads(SCHEMA_FILE.read_text())
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"].endswith("/denial/v1.json")
    assert schema["properties"]["schema"]["const"] == SCHEMA
    assert tuple(schema["properties"]["denied"]["enum"]) == CATEGORIES
    assert schema["additionalProperties"] is False


def test_record_has_the_documented_fields_and_bounds() -> None:
    denial = Denial(
        denied="network",
        attempted="10.96.0.1:443",
        because="egress=none",
        profile="code-exec",
        at=NOW,
        evidence="x" * 1000,
        inferred=True,
    )
    record = denial.to_dict()
    assert list(record) == [
        "schema",
        "denied",
        "attempted",
        "because",
        "profile",
        "at",
        "evidence",
        "inferred",
    ]
    assert record["at"] == "2026-11-30T17:00:00Z"
    assert len(record["evidence"]) == 300
    validate(record)


def test_unknown_category_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown denial category"):
        Denial("nope", "a", "b", "p", NOW, "e", True)  # type: ignore[arg-type]


def _denial(n: int) -> Denial:
    return Denial("memory", "a", "b", "p", NOW.replace(minute=n), f"e{n}", False)


def test_merge_puts_new_first_keeps_old_in_place_and_bounds() -> None:
    existing = [_denial(2).to_dict(), _denial(1).to_dict()]
    merged = merge_recent(existing, [_denial(3), _denial(4)])
    assert [r["evidence"] for r in merged] == ["e4", "e3", "e2", "e1"]
    assert all(type(r) is dict for r in merged)  # the status patch holds plain JSON
    # The same fact seen again is one record, and the list does not change.
    assert merge_recent(merged, [_denial(3)]) == merged
    many = merge_recent([], [_denial(n) for n in range(30)])
    assert len(many) == 20
    assert many[0]["evidence"] == "e29"


# ---------------------------------------------------------------- network

UNREACHABLE = (
    TRACEBACK + '  File "<string>", line 1, in <module>\n'
    '  File "/usr/lib/python3.11/socket.py", line 851, in create_connection\n'
    "    raise exceptions[0]\n"
    "OSError: [Errno 101] Network is unreachable\n"
)


def test_connect_is_network_with_the_address_from_the_program() -> None:
    argv = ("python3", "-c", "import socket; socket.create_connection(('10.96.0.1', 443))")
    record = only(outcome(UNREACHABLE, argv=argv))
    assert record["denied"] == "network"
    assert record["attempted"] == "10.96.0.1:443"
    assert record["because"] == "egress=none"
    assert record["inferred"] is True
    assert record["evidence"] == "OSError: [Errno 101] Network is unreachable"
    validate(record)


def test_urllib_and_bash_and_go_and_node_texts_name_the_address() -> None:
    cases = {
        "urllib.error.URLError: <urlopen error [Errno 101] Network is unreachable>": (
            ("python3", "-c", "urlopen('http://10.96.0.1:443/healthz')"),
            "10.96.0.1:443",
        ),
        "bash: line 1: /dev/tcp/10.96.0.1/443: Network is unreachable": ((), "10.96.0.1:443"),
        "dial tcp 10.96.0.1:443: connect: network is unreachable": ((), "10.96.0.1:443"),
        "Error: connect ENETUNREACH 10.96.0.1:443 - Local (0.0.0.0:0)": ((), "10.96.0.1:443"),
        "curl: (7) Failed to connect to 10.96.0.1 port 443: Network is unreachable": (
            (),
            "10.96.0.1:443",
        ),
        "OSError: [Errno 101] Network is unreachable": (
            ("python3", "-c", "s.connect(('fd00::1', 80))"),
            "[fd00::1]:80",
        ),
    }
    for text, (argv, attempted) in cases.items():
        record = only(outcome(text + "\n", argv=argv))
        assert (record["denied"], record["attempted"]) == ("network", attempted), text


def test_dns_failure_is_network_with_the_name() -> None:
    texts = {
        "socket.gaierror: [Errno -3] Temporary failure in name resolution": (
            "python3",
            "-c",
            "socket.getaddrinfo('example.invalid', 443)",
        ),
        "curl: (6) Could not resolve host: example.invalid": (),
        "Error: getaddrinfo EAI_AGAIN example.invalid": (),
        'dial tcp: lookup example.invalid on 127.0.0.1:53: dial udp 127.0.0.1:53: connect: "'
        "connection refused": (),
    }
    for text, argv in texts.items():
        record = only(outcome(text + "\n", argv=argv))
        assert record["denied"] == "network", text
        assert record["attempted"] == "dns:example.invalid", text
        assert record["because"] == "egress=none (no resolver)"


def test_a_chained_traceback_gives_one_record() -> None:
    text = (
        UNREACHABLE
        + "\nDuring handling of the above exception, another exception occurred:\n\n"
        + "urllib.error.URLError: <urlopen error [Errno 101] Network is unreachable>\n"
    )
    found = denials(outcome(text, argv=("python3", "-c", "urlopen('https://10.96.0.1/')")))
    assert [(d["denied"], d["attempted"]) for d in found] == [("network", "10.96.0.1:443")]


def test_loopback_refusals_and_timeouts_are_ordinary() -> None:
    for text in (
        "ConnectionRefusedError: [Errno 111] Connection refused",
        "urllib.error.URLError: <urlopen error [Errno 111] Connection refused>",
        "TimeoutError: timed out",
        "socket.timeout: timed out",
    ):
        assert denials(outcome(text + "\n", argv=("x", "('127.0.0.1', 8080)"))) == [], text


# ---------------------------------------------------------------- filesystem


def test_writes_outside_the_writable_places_are_filesystem() -> None:
    cases = {
        "sh: 1: cannot create /etc/app.conf: Permission denied": "write /etc/app.conf",
        "mkdir: cannot create directory \u2018/opt/tool\u2019: Read-only file system": (
            "write /opt/tool"
        ),
        "touch: cannot touch '/usr/x': Permission denied": "write /usr/x",
        "cp: cannot create regular file '/usr/local/bin/tool': Permission denied": (
            "write /usr/local/bin/tool"
        ),
        "PermissionError: [Errno 13] Permission denied: '/usr/lib/app.log'": (
            "write /usr/lib/app.log"
        ),
        "OSError: [Errno 30] Read-only file system: '/opt/x'": "write /opt/x",
        "bash: line 1: /etc/motd: Permission denied": "write /etc/motd",
    }
    for text, attempted in cases.items():
        record = only(outcome(text + "\n"))
        assert (record["denied"], record["attempted"]) == ("filesystem", attempted), text
        assert record["because"] == (
            "readOnlyRootFilesystem=true writable=/tmp,/workspace,/run/openblox"
        )
        assert record["inferred"] is True


def test_write_intent_from_a_traceback_frame() -> None:
    text = (
        TRACEBACK + '  File "<string>", line 1, in <module>\n'
        '  File "/usr/lib/python3.11/pathlib.py", line 1078, in write_text\n'
        "    with self.open(mode='w', encoding=encoding) as f:\n"
        '  File "/usr/lib/python3.11/pathlib.py", line 1045, in open\n'
        "    return io.open(self, mode, buffering, encoding, errors, newline)\n"
        "PermissionError: [Errno 13] Permission denied: '/var/cache/app.json'\n"
    )
    assert only(outcome(text))["attempted"] == "write /var/cache/app.json"


def test_reads_of_root_only_files_are_ordinary_when_the_text_says_read() -> None:
    for text in (
        "cat: /etc/shadow: Permission denied",
        "ls: cannot open directory '/root': Permission denied",
        "grep: /etc/gshadow: Permission denied",
        TRACEBACK + '  File "/workspace/a.py", line 3, in <module>\n'
        "    with open('/etc/shadow') as handle:\n"
        "PermissionError: [Errno 13] Permission denied: '/etc/shadow'",
        TRACEBACK + '  File "/workspace/a.py", line 3, in <module>\n'
        "    data = open(path, 'rb').read()\n"
        "PermissionError: [Errno 13] Permission denied: '/etc/shadow'",
    ):
        assert denials(outcome(text + "\n")) == [], text


def test_a_script_opening_for_write_is_filesystem() -> None:
    text = (
        TRACEBACK + '  File "/workspace/report.py", line 2, in <module>\n'
        '    with open("/results.csv", "w") as handle:\n'
        "PermissionError: [Errno 13] Permission denied: '/results.csv'\n"
    )
    assert only(outcome(text))["attempted"] == "write /results.csv"


def test_refusals_inside_the_writable_places_are_ordinary() -> None:
    for text in (
        "cat: /workspace/key: Permission denied",
        "openblox: /workspace/run.sh: Permission denied",
        "PermissionError: [Errno 13] Permission denied: 'notes.txt'",  # relative: /workspace
        "sh: 1: /tmp/t: Permission denied",
    ):
        assert denials(outcome(text + "\n", exit_code=126)) == [], text


def test_exec_on_scratch_is_filesystem_only_where_scratch_is_noexec() -> None:
    text = "openblox: /tmp/tool: Permission denied\n"
    assert denials(outcome(text, exit_code=126)) == []
    record = only(outcome(text, exit_code=126), replace(POLICY, scratch_noexec=True))
    assert (record["denied"], record["attempted"], record["because"]) == (
        "filesystem",
        "exec /tmp/tool",
        "scratch=noexec",
    )


# ---------------------------------------------------------------- privilege


def test_privileged_operations() -> None:
    cases = [
        ("PermissionError: [Errno 1] Operation not permitted", ("os.setuid(0)",), "change user"),
        ("mount: /tmp/m: must be superuser to use mount.", (), "mount a filesystem"),
        ("date: cannot set date: Operation not permitted", (), "set the system clock"),
        ("hostname: you must be root to change the host name", (), "set the hostname"),
        ("chown: changing ownership of '/tmp': Operation not permitted", (), "change file"),
        ("PermissionError: [Errno 1] Operation not permitted: '/tmp'", ("os.chown",), "change"),
        ("su: Authentication failure", (), "change user"),
        ("sh: 1: sudo: not found", (), "sudo"),
        ("nice: cannot set niceness: Permission denied", (), "raise scheduling priority"),
        ('sysctl: setting key "net.ipv4.ip_forward": Invalid argument', (), "sysctl"),
        ("sh: 1: ulimit: error setting limit (Operation not permitted)", (), "resource limit"),
        ("chroot: cannot change root directory to '/': Operation not permitted", (), "chroot"),
        ("PermissionError: [Errno 1] Operation not permitted", ("SOCK_RAW",), "raw socket"),
        ("sh: 1: cannot create /proc/sys/vm/swappiness: Permission denied", (), "sysctl"),
    ]
    for text, argv, attempted in cases:
        record = only(outcome(text + "\n", argv=argv))
        assert record["denied"] == "privilege", text
        assert attempted in record["attempted"], (text, record["attempted"])
        assert record["because"] == (
            "user=1000 runAsNonRoot=true capabilities=none noNewPrivileges=true"
        )


def test_a_silent_failed_syscall_is_missed() -> None:
    # ctypes returns -1 and the program prints its own words: nothing to read.
    assert denials(outcome("attach failed: 1\n")) == []


# ---------------------------------------------------------------- processes, disk, memory


def test_refused_fork_is_processes_but_other_eagain_is_not() -> None:
    popen = (
        TRACEBACK + '  File "/usr/lib/python3.11/subprocess.py", line 1834, in _execute_child\n'
        "    self.pid = _fork_exec(\n"
        "BlockingIOError: [Errno 11] Resource temporarily unavailable\n"
    )
    assert only(outcome(popen))["attempted"] == "start a process"
    threads = "RuntimeError: can't start new thread\n"
    assert only(outcome(threads))["attempted"] == "start a thread"
    bash = "bash: fork: retry: Resource temporarily unavailable\n"
    assert only(outcome(bash))["denied"] == "processes"
    bare = TRACEBACK + "BlockingIOError: [Errno 11] Resource temporarily unavailable\n"
    assert only(outcome(bare, argv=("python3", "-c", "os.fork()")))["denied"] == "processes"
    nonblocking = ("python3", "-c", "os.set_blocking(r, False); os.read(r, 1)")
    assert denials(outcome(bare, argv=nonblocking)) == []


def test_full_scratch_is_disk() -> None:
    record = only(outcome("dd: error writing '/tmp/fill': No space left on device\n"))
    assert (record["denied"], record["attempted"]) == ("disk", "write /tmp/fill")
    assert record["because"] == "scratch=128Mi per writable volume (/tmp,/workspace,/run/openblox)"
    record = only(outcome("OSError: [Errno 28] No space left on device\n"))
    assert record["attempted"] == "write past the scratch size"


def test_sigkill_before_the_timeout_is_memory() -> None:
    record = only(outcome(exit_code=137, signal=9))
    assert (record["denied"], record["because"], record["inferred"]) == (
        "memory",
        "memory=512Mi",
        True,
    )
    # exit(137) is the program's own choice; the supervisor reports no signal.
    assert denials(outcome(exit_code=137, signal=0)) == []
    # Without the supervisor's word, 137 is taken for a kill.
    assert only(outcome(exit_code=137, signal=None))["denied"] == "memory"
    # A shell reports its child's SIGKILL, whatever it exits with afterwards.
    assert only(outcome("Killed\n", exit_code=0))["denied"] == "memory"
    assert only(outcome("bash: line 1:    42 Killed    python3 big.py\n"))["denied"] == "memory"
    assert only(outcome("MemoryError\n"))["denied"] == "memory"


def test_timeout_and_output_cap_are_not_inferred() -> None:
    found = denials(outcome(exit_code=137, signal=9, timed_out=True, truncated=True))
    assert [(d["denied"], d["inferred"]) for d in found] == [
        ("time", False),
        ("output", False),
    ]
    assert found[0]["attempted"] == "run longer than 60s"
    assert found[0]["because"] == "timeout=60s"
    assert found[1]["because"] == "outputBytes=1048576"


# ---------------------------------------------------------------- ordinary failures


@pytest.mark.parametrize(
    "stderr",
    [
        "FileNotFoundError: [Errno 2] No such file or directory: '/workspace/input.csv'",
        "cat: /workspace/missing.txt: No such file or directory",
        "ValueError: price must be positive",
        "ZeroDivisionError: division by zero",
        "ModuleNotFoundError: No module named 'requests'",
        "subprocess.TimeoutExpired: Command '['sleep', '5']' timed out after 1 seconds",
        "json.decoder.JSONDecodeError: Expecting property name enclosed in double quotes",
        "IsADirectoryError: [Errno 21] Is a directory: '/workspace'",
        "sh: 1: jq: not found",
        "RecursionError: maximum recursion depth exceeded",
        "mkdir: cannot create directory '/workspace/a/b/c': No such file or directory",
        "warning: cache is cold, retrying",
    ],
)
def test_ordinary_failures_are_not_denials(stderr: str) -> None:
    assert denials(outcome(stderr + "\n")) == []


def test_stdout_is_read_only_when_the_command_failed() -> None:
    text = "OSError: [Errno 101] Network is unreachable\n"
    assert denials(outcome(stdout=text, exit_code=0)) == []
    assert only(outcome(stdout=text, exit_code=1))["denied"] == "network"


# ---------------------------------------------------------------- outside the call

OOM_POD: dict[str, Any] = {
    "metadata": {"name": "demo", "namespace": "team-a", "uid": "u1"},
    "spec": {
        "activeDeadlineSeconds": 3600,
        "containers": [{"name": "sandbox", "resources": {"limits": {"memory": "512Mi"}}}],
    },
    "status": {
        "phase": "Failed",
        "containerStatuses": [
            {
                "name": "sandbox",
                "state": {
                    "terminated": {
                        "reason": "OOMKilled",
                        "exitCode": 128,
                        "finishedAt": "2026-11-30T16:57:18Z",
                    }
                },
            }
        ],
    },
}


def test_oom_killed_pod_is_a_memory_denial_with_the_kubelets_time() -> None:
    denial = pod_denial(OOM_POD, profile="code-exec", now=NOW)
    assert denial is not None
    record = denial.to_dict()
    assert record["denied"] == "memory"
    assert record["because"] == "memory=512Mi"
    assert record["at"] == "2026-11-30T16:57:18Z"
    assert record["inferred"] is False
    assert "OOMKilled" in record["evidence"]
    validate(record)
    # Read again later: the same record, so status and Events keep one copy.
    again = pod_denial(OOM_POD, profile="code-exec", now=NOW.replace(hour=18))
    assert again == denial


def test_other_pod_ends() -> None:
    crashed = json.loads(json.dumps(OOM_POD))
    crashed["status"]["containerStatuses"][0]["state"]["terminated"]["reason"] = "Error"
    assert pod_denial(crashed, profile="code-exec", now=NOW) is None
    deadline = {**OOM_POD, "status": {"phase": "Failed", "reason": "DeadlineExceeded"}}
    record = pod_denial(deadline, profile="code-exec", now=NOW)
    assert record is not None
    assert (record.denied, record.because) == ("lifetime", "maxAgeSeconds=3600")
    evicted = {
        **OOM_POD,
        "status": {
            "phase": "Failed",
            "reason": "Evicted",
            "message": "Pod ephemeral local storage usage exceeds the total limit of 64Mi",
        },
    }
    evicted_record = pod_denial(evicted, profile="code-exec", now=NOW)
    assert evicted_record is not None
    assert evicted_record.denied == "disk"


def test_lifetime_denials_are_deterministic() -> None:
    profile = default_profile()
    sandbox = make_sandbox(spec={"maxAgeSeconds": 600})
    expiry = compute_expiry(sandbox, effective_lifetime(sandbox, profile), NOW)
    record = lifetime_denial(sandbox, profile, expiry).to_dict()
    assert record["denied"] == "lifetime"
    assert record["because"] == "maxAgeSeconds=600"
    assert record["at"] == "2025-01-02T03:14:05Z"
    assert record["inferred"] is False
    validate(record)
    idle_sandbox = make_sandbox(spec={"idleTimeoutSeconds": 60})
    idle = compute_expiry(idle_sandbox, effective_lifetime(idle_sandbox, profile), NOW)
    idle_record = lifetime_denial(idle_sandbox, profile, idle).to_dict()
    assert idle_record["because"] == "idleTimeoutSeconds=60"
    assert CREATED.strftime("%Y-%m-%dT%H:%M:%SZ") in idle_record["evidence"]


def test_admission_denial() -> None:
    record = admission_denial("nope", 'profile "nope" does not exist', NOW).to_dict()
    assert record["denied"] == "admission"
    assert record["attempted"] == "create a Sandbox with profile=nope"
    assert record["inferred"] is False
    validate(record)


def test_status_puts_observed_denials_first_and_keeps_earlier_ones() -> None:
    earlier = _denial(1).to_dict()
    sandbox = make_sandbox(status={"denials": [earlier]})
    oom = pod_denial(OOM_POD, profile="code-exec", now=NOW)
    assert oom is not None
    status = build_status(
        sandbox,
        Observation(denials=(oom,)),
        pod_name=None,
        runtime_class_name=None,
        profile_digest=None,
        exec_limits=None,
        now=NOW,
    )
    assert [r["denied"] for r in status["denials"]] == ["memory", "memory"]
    assert status["denials"][0]["at"] == "2026-11-30T16:57:18Z"
    assert status["denials"][1] == earlier
    quiet = build_status(
        make_sandbox(),
        Observation(),
        pod_name=None,
        runtime_class_name=None,
        profile_digest=None,
        exec_limits=None,
        now=NOW,
    )
    assert "denials" not in quiet


MOUNTS_NOEXEC = """\
none / 9p ro,relatime 0 0
none /tmp tmpfs rw,nosuid,nodev,noexec,relatime 0 0
none /workspace tmpfs rw,nosuid,nodev,noexec,relatime 0 0
none /run/openblox tmpfs rw,nosuid,nodev,noexec,relatime 0 0
"""


def test_scratch_counts_as_noexec_only_when_every_writable_place_is() -> None:
    writable = ("/tmp", "/workspace", "/run/openblox")
    assert scratch_mounted_noexec(MOUNTS_NOEXEC, writable)
    one_exec = MOUNTS_NOEXEC.replace(
        "/workspace tmpfs rw,nosuid,nodev,noexec", "/workspace tmpfs rw"
    )
    assert not scratch_mounted_noexec(one_exec, writable)
    # A later mount over the same point is the one in force.
    remounted = MOUNTS_NOEXEC + "none /tmp tmpfs rw,relatime 0 0\n"
    assert not scratch_mounted_noexec(remounted, writable)
    missing = "\n".join(line for line in MOUNTS_NOEXEC.splitlines() if "/run/openblox" not in line)
    assert not scratch_mounted_noexec(missing, writable)
    assert not scratch_mounted_noexec("", writable)
    assert not scratch_mounted_noexec(MOUNTS_NOEXEC, ())
