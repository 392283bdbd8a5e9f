"""openblox.Client on the real cluster: exec, files and failure modes, all via pods/exec."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hashlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from openblox.client import (
    AdmissionDenied,
    AsyncClient,
    Client,
    ExecTransportError,
    FileOperationError,
    InvalidArgument,
    ProcessNotFound,
    Sandbox,
    SandboxGone,
    SandboxNotReady,
)
from openblox.transport import AuthorizerRefused
from tests.cluster.capacity import require_sandbox_room
from tests.cluster.kubectl import Kube
from tests.cluster.sandboxes import (
    admission_has,
    client_role_kubeconfig,
    extra_profiles,
    get_sandbox,
    opted_in_namespace,
    profile_yaml,
    wait_for,
)

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def client_ns(operator: Kube) -> Iterator[str]:
    with opted_in_namespace(operator, "t-client") as name:
        yield name


@pytest.fixture(scope="module")
def client(operator: Kube, client_ns: str) -> Client:
    return Client(client_ns, kubeconfig=operator.kubeconfig)


@pytest.fixture(scope="module")
def box(operator: Kube, client: Client) -> Iterator[Sandbox]:
    require_sandbox_room(operator, "code-exec")
    sandbox = client.create("code-exec", "shared")
    yield sandbox
    sandbox.delete()


def test_create_is_idempotent_and_returns_a_ready_sandbox(client: Client, box: Sandbox) -> None:
    again = client.create("code-exec", "shared")
    assert again.name == box.name
    assert again.status["boundary"] == "gvisor"
    assert [s.name for s in client.list()].count("shared") == 1


def test_exec_returns_exact_bytes_and_exit_code(box: Sandbox) -> None:
    result = box.exec(
        [
            "python3",
            "-c",
            "import sys; sys.stdout.buffer.write(bytes(range(256))*4); "
            "sys.stderr.write('warn\\n'); sys.exit(3)",
        ]
    )
    assert result.stdout == bytes(range(256)) * 4
    assert result.stderr == b"warn\n"
    assert result.exit_code == 3
    assert not result.timed_out and not result.truncated


def test_argv_is_passed_verbatim(box: Sandbox) -> None:
    tricky = ["a b", "it's", 'say "hi"', "line1\nline2", "ünïcødé ✓", "$(whoami)", "; rm -rf /"]
    result = box.exec(
        ["python3", "-c", "import sys, json; print(json.dumps(sys.argv[1:]))", *tricky]
    )
    import json

    assert json.loads(result.stdout) == tricky


def test_stdin_env_and_cwd(box: Sandbox) -> None:
    result = box.exec(
        ["sh", "-c", "cat; echo; echo $GREETING; pwd"],
        stdin=b"from stdin",
        env={"GREETING": "hello"},
        cwd="/tmp",
    )
    assert result.stdout == b"from stdin\nhello\n/tmp\n"


def test_stdin_flows_in_while_output_flows_out(box: Sandbox) -> None:
    # One thread writes the exec stream while another reads it, for 16 MiB.
    payload = os.urandom(16 << 20)
    echo_as_it_reads = (
        "import hashlib, sys\n"
        "h = hashlib.sha256()\n"
        "for block in iter(lambda: sys.stdin.buffer.read1(65536), b''):\n"
        "    h.update(block); sys.stdout.buffer.write(b'.'); sys.stdout.flush()\n"
        "print(h.hexdigest())\n"
    )
    result = box.exec(["python3", "-c", echo_as_it_reads], stdin=payload, timeout=60)
    assert result.exit_code == 0, result.stderr
    dots, _, digest = result.stdout.rpartition(b"\n")[0].rpartition(b".")
    assert digest.decode() == hashlib.sha256(payload).hexdigest()
    assert len(dots) >= 16, result.stdout[:100]


def test_every_exec_with_stdin_returns_its_verdict(box: Sandbox) -> None:
    # Two threads on one TLS connection once lost about one exec stream in forty.
    for i in range(120):
        result = box.exec(["sh", "-c", "cat; exit 7"], stdin=f"{i}".encode() * 500)
        assert (result.exit_code, result.stdout) == (7, f"{i}".encode() * 500), i


def test_command_not_found_is_127_with_a_message(box: Sandbox) -> None:
    result = box.exec(["no-such-command", "--flag"])
    assert result.exit_code == 127
    assert b"no-such-command" in result.stderr


def test_timeout_kills_the_whole_tree_including_setsid(box: Sandbox) -> None:
    started = time.monotonic()
    result = box.exec(
        [
            "sh",
            "-c",
            "sleep 1000 & setsid sleep 1000 & "
            "python3 -c 'import os,time\nif os.fork()==0:\n  os.setsid()\n"
            "  if os.fork()==0: time.sleep(1000)\n' ; sleep 1000",
        ],
        timeout=3,
    )
    assert result.timed_out
    assert time.monotonic() - started < 20
    left = box.exec(["sh", "-c", "ps -eo args | grep -c '[s]leep 1000' || true"])
    assert left.stdout.strip() == b"0", left.stdout


def test_output_flood_is_capped_and_the_sandbox_stays_usable(box: Sandbox) -> None:
    result = box.exec(
        ["python3", "-c", "import sys\nfor _ in range(50): sys.stdout.write('x'*1048576)"],
        output_limit=1 << 20,
    )
    assert result.truncated
    assert len(result.stdout) + len(result.stderr) <= 1 << 20
    assert result.exit_code == 0  # the writer was never blocked on a full pipe
    assert box.exec(["echo", "still here"]).stdout == b"still here\n"


def test_the_command_cannot_write_into_the_supervisors_stream(box: Sandbox) -> None:
    """The supervisor is not dumpable, so its /proc entries are closed to the command, and
    the client enforces the cap itself whatever arrives."""
    result = box.exec(
        ["sh", "-c", "(echo forged > /proc/$PPID/fd/1) 2>/dev/null && echo WROTE || echo REFUSED"],
        output_limit=1000,
    )
    assert result.stdout == b"REFUSED\n"


def test_a_call_may_lower_but_not_raise_the_profiles_limits(box: Sandbox) -> None:
    with pytest.raises(InvalidArgument, match="above the profile"):
        box.exec(["true"], timeout=10_000)
    with pytest.raises(InvalidArgument, match="not a shell string"):
        box.exec("echo hi")  # a str passes as Sequence[str]: only the runtime check catches it


def test_files_round_trip_and_errors_name_the_path(box: Sandbox) -> None:
    payload = bytes(range(256)) * 4096 + b"\x00end"
    box.files.write("/workspace/data.bin", payload)
    assert box.files.read("/workspace/data.bin") == payload
    names = {entry["name"] for entry in box.files.list("/workspace")}
    assert "data.bin" in names
    box.files.remove("/workspace/data.bin")
    with pytest.raises(FileOperationError, match=r"/workspace/data\.bin"):
        box.files.read("/workspace/data.bin")
    # Outside /tmp, /workspace and /run/openblox nothing is writable: the root is
    # read-only and owned by root, so the kernel's first refusal is the permission check.
    with pytest.raises(FileOperationError, match=r"^/usr/evil: (Permission denied|Read-only)"):
        box.files.write("/usr/evil", b"x")
    with pytest.raises(FileOperationError, match="larger than the read limit of 10 bytes"):
        box.files.write("/tmp/big", b"x" * 11)
        box.files.read("/tmp/big", limit=10)


# containerd's own words when it could not start an exec at all (its task load timed out
# on a node busy with 50 at once): the command never ran, so running it again is safe.
NOT_STARTED = "failed to exec in container"


def test_fifty_concurrent_execs_return_their_own_output(box: Sandbox) -> None:
    def run(i: int) -> tuple[int, bytes]:
        for _ in range(2):
            try:
                return i, box.exec(["python3", "-c", f"print('{i}' * 1000)"]).stdout
            except ExecTransportError as error:
                if NOT_STARTED not in str(error):
                    raise
        return i, box.exec(["python3", "-c", f"print('{i}' * 1000)"]).stdout

    with concurrent.futures.ThreadPoolExecutor(50) as pool:
        for i, out in pool.map(run, range(50)):
            assert out == (str(i) * 1000 + "\n").encode()


def test_exec_on_a_deleted_sandbox_fails_fast_with_a_typed_error(client: Client) -> None:
    sandbox = client.create("code-exec", "doomed")
    sandbox.delete()
    deadline = time.monotonic() + 60
    with pytest.raises(SandboxGone):
        while time.monotonic() < deadline:
            sandbox.exec(["true"])
            time.sleep(0.5)


def test_unknown_profile_raises_admission_denied_with_a_record(client: Client) -> None:
    with pytest.raises(AdmissionDenied) as raised:
        client.create("no-such-profile")
    assert raised.value.record.denied == "admission"
    assert "does not exist" in raised.value.record.because


def test_a_create_the_authorizer_refuses_is_no_denial_and_an_admission_refusal_is(
    operator: Kube, tmp_path: Path
) -> None:
    """RBAC judges the caller's credentials, not the Sandbox: its 403 is `AuthorizerRefused`
    with no denial record, while what admission refuses for the same caller is one."""
    with (
        opted_in_namespace(operator, "t-rbac") as own,
        opted_in_namespace(operator, "t-rbac-other") as other,
    ):
        tenant = Client(own, kubeconfig=client_role_kubeconfig(operator, own, tmp_path))
        with pytest.raises(AuthorizerRefused) as refused:
            tenant.create("code-exec", "elsewhere", other)
        assert refused.value.status == 403
        wanted = 'cannot create resource "sandboxes" in API group "openblox.sh" in the namespace'
        assert f'{wanted} "{other}"' in refused.value.message
        assert not hasattr(refused.value, "record")
        with pytest.raises(AdmissionDenied) as denied:
            tenant.create("no-such-profile", "refused")
        assert denied.value.record.denied == "admission"
        assert not isinstance(denied.value.__cause__, AuthorizerRefused)
        assert get_sandbox(operator, "elsewhere", other) is None


def test_a_too_long_lifetime_raises_admission_denied_and_spares_a_running_sandbox(
    client: Client, box: Sandbox
) -> None:
    with pytest.raises(AdmissionDenied) as raised:
        client.create("code-exec", "too-long", max_age_seconds=10**6)
    record = raised.value.record
    assert record.denied == "admission"
    assert record.profile == "code-exec"
    assert 'spec.maxAgeSeconds is 1000000s but profile "code-exec" allows at most' in (
        record.because
    )
    assert box.exec(["python3", "-c", "print(6*7)"]).stdout == b"42\n"


def test_terminal_condition_raises_at_once(client: Client) -> None:
    started = time.monotonic()
    with pytest.raises(SandboxNotReady) as raised:
        client.create("code-exec-kata", "kata", timeout=120)
    assert raised.value.reason == "RuntimeUnavailable"
    assert time.monotonic() - started < 60
    client.delete("kata")


def test_activity_is_recorded_through_the_api_server(client: Client, box: Sandbox) -> None:
    box._steps._last_touch = 0.0  # make the debounce let this call through
    box.exec(["true"])
    stamp = client.get(box.name)._body["metadata"]["annotations"]["openblox.sh/last-activity"]
    assert stamp.endswith("Z")


def test_async_client(operator: Kube, client_ns: str) -> None:
    async def scenario() -> tuple[bytes, bytes, bool, bytes]:
        client = AsyncClient(client_ns, kubeconfig=operator.kubeconfig)
        async with await client.create("code-exec", "async") as sandbox:
            result = await sandbox.exec(["python3", "-c", "print(6*7)"])
            await sandbox.files.write("/workspace/a.txt", b"same surface")
            started = await sandbox.start_process("echo", ["sh", "-c", "echo bg; sleep 60"])
            for _ in range(50):
                if await sandbox.logs("echo") == b"bg\n":
                    break
                await asyncio.sleep(0.1)
            logs = await sandbox.logs("echo")
            await sandbox.stop_process("echo", grace=0.5)
            return (
                result.stdout,
                await sandbox.files.read("/workspace/a.txt"),
                bool(started.started),
                logs,
            )

    assert asyncio.run(scenario()) == (b"42\n", b"same surface", True, b"bg\n")


def test_command_line_run_prints_42_and_returns_the_exit_status(
    operator: Kube, client_ns: str
) -> None:
    base = [
        sys.executable,
        "-m",
        "openblox.cli",
        "--kubeconfig",
        operator.kubeconfig,
        "-n",
        client_ns,
        "run",
        "--",
    ]
    ok = subprocess.run(
        [*base, "python3", "-c", "print(6*7)"], capture_output=True, timeout=180, check=False
    )
    assert (ok.returncode, ok.stdout) == (0, b"42\n")
    failing = subprocess.run(
        [*base, "sh", "-c", "exit 5"], capture_output=True, timeout=180, check=False
    )
    assert failing.returncode == 5


# ---------------------------------------------------------------------- streaming


def test_stream_hands_over_output_while_the_command_runs(box: Sandbox) -> None:
    started = time.monotonic()
    arrivals: list[tuple[float, str, bytes]] = []
    stream = box.stream(["sh", "-c", "echo one; sleep 1.5; echo two >&2; exit 5"])
    for chunk in stream:
        arrivals.append((time.monotonic() - started, chunk.stream, chunk.data))
    assert [(s, d) for _, s, d in arrivals] == [("stdout", b"one\n"), ("stderr", b"two\n")]
    assert arrivals[1][0] - arrivals[0][0] > 1.0, "the first line came before the command ended"
    assert stream.result.exit_code == 5
    assert stream.result.stdout == b"one\n"  # the tail kept for classifying denials


def test_stream_keeps_the_cap(box: Sandbox) -> None:
    stream = box.stream(["head", "-c", "5000000", "/dev/zero"], output_limit=100_000)
    received = sum(len(chunk.data) for chunk in stream)
    assert received == 100_000
    assert stream.result.truncated is True


# ---------------------------------------------------------------------- background processes


def test_a_background_process_is_idempotent_by_name_and_keeps_its_logs(box: Sandbox) -> None:
    argv = ["python3", "-u", "-c", "import time; print('up'); time.sleep(1000)"]
    first = box.start_process("sleeper", argv)
    again = box.start_process("sleeper", argv)
    assert first.started is True and first.running
    assert again.started is False and again.pid == first.pid
    deadline = time.monotonic() + 10
    while box.logs("sleeper") != b"up\n" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert box.logs("sleeper") == b"up\n"
    listed = {p.name: p for p in box.processes()}
    assert listed["sleeper"].running and listed["sleeper"].argv == tuple(argv)
    stopped = box.stop_process("sleeper")
    assert not stopped.running and stopped.stopped and stopped.signal in (9, 15)
    restarted = box.start_process("sleeper", argv)
    assert restarted.started is True and restarted.pid != first.pid
    box.stop_process("sleeper", grace=0.5)


def test_stop_ends_the_whole_tree_even_what_left_the_session(box: Sandbox) -> None:
    box.start_process("tree", ["sh", "-c", "setsid sleep 4242 & sleep 4242 & wait"])
    assert b"4242" in box.exec(["ps", "-eo", "args"]).stdout
    box.stop_process("tree", grace=0.5)
    assert b"sleep 4242" not in box.exec(["ps", "-eo", "args"]).stdout


def test_an_ended_process_reports_its_exit_code_and_stderr(box: Sandbox) -> None:
    box.start_process("short", ["sh", "-c", "echo bye >&2; exit 4"])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        ended = {p.name: p for p in box.processes()}["short"]
        if not ended.running:
            break
        time.sleep(0.2)
    assert (ended.running, ended.exit_code, ended.stopped) == (False, 4, False)
    assert box.logs("short", stream="stderr") == b"bye\n"


def test_a_background_server_answers_an_exec_on_loopback(box: Sandbox) -> None:
    box.files.write("/workspace/index.html", b"served from the sandbox")
    box.start_process(
        "web",
        ["python3", "-m", "http.server", "8123", "--bind", "127.0.0.1"],
        cwd="/workspace",
    )
    fetch = (
        "import time, urllib.request\n"
        "for _ in range(50):\n"
        "    try:\n"
        "        print(urllib.request.urlopen('http://127.0.0.1:8123/index.html').read().decode())\n"
        "        break\n"
        "    except OSError:\n"
        "        time.sleep(0.1)\n"
    )
    try:
        assert box.exec(["python3", "-c", fetch]).stdout == b"served from the sandbox\n"
    finally:
        box.stop_process("web")


def test_background_process_bad_input_is_refused_with_a_clear_error(box: Sandbox) -> None:
    for bad in ("", "../escape", "Upper", "a/b", "x" * 64):
        with pytest.raises(InvalidArgument, match="process name"):
            box.start_process(bad, ["true"])
    with pytest.raises(InvalidArgument, match="shell string"):
        box.start_process("shell", "echo hi")  # a str is a Sequence[str] to a type checker
    with pytest.raises(ProcessNotFound):
        box.logs("never-started")
    with pytest.raises(ProcessNotFound):
        box.stop_process("never-started")
    assert box.exec(["true"]).exit_code == 0


def test_command_line_background_commands(operator: Kube, client_ns: str, box: Sandbox) -> None:
    base = [sys.executable, "-m", "openblox.cli", "--kubeconfig", operator.kubeconfig]
    base += ["-n", client_ns]

    def cli(*args: str) -> str:
        done = subprocess.run([*base, *args], capture_output=True, timeout=120, check=True)
        return done.stdout.decode()

    assert "started" in cli("start", box.name, "cli-bg", "--", "sh", "-c", "echo hello; sleep 60")
    assert "already running" in cli("start", box.name, "cli-bg", "--", "true")
    assert "cli-bg" in cli("ps", box.name) and "running" in cli("ps", box.name)
    deadline = time.monotonic() + 10
    while cli("logs", box.name, "cli-bg") != "hello\n" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert cli("logs", box.name, "cli-bg") == "hello\n"
    assert "stopped" in cli("stop", box.name, "cli-bg", "--grace", "0.5")


class _CuttableRelay:
    """A loopback TCP relay to the API server that can drop every connection at once: an
    API server (or load balancer) hiccup, as the client sees it. TLS passes through."""

    def __init__(self, target: tuple[str, int]) -> None:
        self._target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._open: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                inbound, _ = self._listener.accept()
            except OSError:
                return
            outbound = socket.create_connection(self._target)
            self._open += [inbound, outbound]
            for source, sink in ((inbound, outbound), (outbound, inbound)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)

    def cut(self) -> None:
        # shutdown, not only close: a close does not wake the thread blocked in accept(),
        # and the socket would go on accepting.
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        for connection in self._open:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
                connection.close()


def test_an_api_server_hiccup_mid_exec_is_a_typed_error_never_a_result(
    operator: Kube, client_ns: str, box: Sandbox, tmp_path: Path
) -> None:
    config = yaml.safe_load(Path(operator.kubeconfig).read_text())
    server = urlsplit(config["clusters"][0]["cluster"]["server"])
    relay = _CuttableRelay((server.hostname or "127.0.0.1", server.port or 443))
    config["clusters"][0]["cluster"]["server"] = f"https://{server.hostname}:{relay.port}"
    kubeconfig = tmp_path / "through-relay.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    sandbox = Client(client_ns, kubeconfig=str(kubeconfig)).get(box.name)
    chunks = iter(sandbox.stream(["sh", "-c", "echo start; sleep 3; echo end"]))
    assert next(chunks).data == b"start\n"
    relay.cut()
    with pytest.raises(ExecTransportError, match=r"cannot be reached|broke"):
        list(chunks)
    # The sandbox itself is fine, through the API server directly.
    assert box.exec(["echo", "still here"]).stdout == b"still here\n"


def small_profile() -> str:
    """Made when a test runs: it names the image `make up` built, which a fresh clone has
    not built when its tests are collected."""
    return profile_yaml(resources={"cpu": "100m", "memory": "128Mi", "scratch": "16Mi"})


def test_fifty_concurrent_execs_across_ten_sandboxes_return_their_own_output(
    operator: Kube, client: Client
) -> None:
    with extra_profiles(operator, {"test-small": small_profile()}):
        wait_for("admission params", lambda: admission_has(operator, "test-small"), 30)
        require_sandbox_room(operator, "test-small", 10)
        with concurrent.futures.ThreadPoolExecutor(10) as pool:
            sandboxes = list(
                pool.map(lambda i: client.create("test-small", f"many-{i}", timeout=300), range(10))
            )
        try:

            def run(job: tuple[Sandbox, int]) -> tuple[bytes, bytes]:
                sandbox, index = job
                token = f"{sandbox.name}/{index}"
                # The UTS host name: /etc/hostname is the image's own file where the
                # container runs from the node's EROFS image (docs/adr/0014).
                result = sandbox.exec(
                    ["sh", "-c", 'printf "%s " "$1"; cat /proc/sys/kernel/hostname', "sh", token]
                )
                return result.stdout, f"{token} {sandbox.pod}\n".encode()

            jobs = [(sandbox, index) for sandbox in sandboxes for index in range(5)]
            with concurrent.futures.ThreadPoolExecutor(50) as pool:
                outcomes = list(pool.map(run, jobs))
            assert [got for got, _ in outcomes] == [expected for _, expected in outcomes]
        finally:
            for sandbox in sandboxes:
                sandbox.delete()
