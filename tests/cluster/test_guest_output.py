"""A guest cannot flood its caller, nor make the client's calls follow what it planted.

Issue 30, finding 4: the calls about background commands read what came back with no
bound, and the guest controls the state directory they read (/run/openblox/processes).
Each test here is an attack the guest can make on the real cluster, with the caller a
tenant holding only the openblox-client role: it plants records and links in the state
directory, holds a record's lock itself, or writes into the `ps` supervisor's stdout
through /proc. The caller must get a bounded answer or a clear typed error every time,
and nothing the guest planted may be followed or signalled.

The checks compare names and types as strings where the types are new, so that on a
client without them each test fails at its assertion, not at import.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from openblox.client import AsyncClient, Client, ExecTransportError, OpenbloxClientError, Sandbox
from tests.cluster.capacity import require_sandbox_room
from tests.cluster.kubectl import Kube
from tests.cluster.sandboxes import client_role_kubeconfig, opted_in_namespace, wait_for

pytestmark = pytest.mark.cluster

STATE = "/run/openblox/processes"
# What the supervisor's answer to `ps` may hold (client/processes.py ANSWER_BYTES), and
# how many entries of the state directory it looks at (guest/supervisor.py MAX_ENTRIES).
ANSWER_BYTES = 1 << 20
MAX_ENTRIES = 1024
SLEEPER = ["sh", "-c", "echo up; exec sleep 600"]


@pytest.fixture(scope="module")
def tenant_ns(operator: Kube) -> Iterator[str]:
    with opted_in_namespace(operator, "t-guest-out") as name:
        yield name


@pytest.fixture(scope="module")
def tenant_kubeconfig(
    operator: Kube, tenant_ns: str, tmp_path_factory: pytest.TempPathFactory
) -> str:
    directory = tmp_path_factory.mktemp("tenant")
    return client_role_kubeconfig(operator, tenant_ns, directory, duration="60m")


@pytest.fixture(scope="module")
def box(operator: Kube, tenant_ns: str, tenant_kubeconfig: str) -> Iterator[Sandbox]:
    require_sandbox_room(operator, "code-exec")
    sandbox = Client(tenant_ns, kubeconfig=tenant_kubeconfig).create("code-exec", "guest-out")
    yield sandbox
    sandbox.delete()


def guest(box: Sandbox, script: str) -> bytes:
    """Python run by the guest inside the sandbox (as the tenant's exec)."""
    result = box.exec(["python3", "-c", script], timeout=60)
    assert result.exit_code == 0, result.stderr.decode("utf-8", "replace")
    return result.stdout


def forget(box: Sandbox, *names: str) -> None:
    """Stop what a test started and remove what it planted, so the next test starts clean."""
    for name in names:
        with contextlib.suppress(OpenbloxClientError):  # planted, never started
            box.stop_process(name, grace=0.2)
    paths = [f"{STATE}/{name}" for name in names]
    box.exec(["rm", "-rf", *paths, "/tmp/planted"])


def cli(kubeconfig: str, namespace: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    command = [sys.executable, "-m", "openblox.cli", "--kubeconfig", kubeconfig, "-n", namespace]
    return subprocess.run([*command, *args], capture_output=True, timeout=180, check=False)


# --- a record that floods ps ------------------------------------------------------------------

PLANT_LINKED = f"""
import os
os.makedirs("/tmp/planted", exist_ok=True)
with open("/tmp/planted/meta", "w") as handle:  # 64 MiB, in scratch, which is bigger
    handle.write('{{"name": "' + "x" * (64 << 20) + '", "argv": ["forged"]}}')
os.makedirs("{STATE}/flood", exist_ok=True)
os.symlink("/tmp/planted/meta", "{STATE}/flood/meta")
"""
PLANT_LARGE = f"""
import os
os.makedirs("{STATE}/flood", exist_ok=True)
with open("{STATE}/flood/meta", "w") as handle:  # 8 MiB, inside the 16 MiB state volume
    handle.write('{{"name": "' + "x" * (8 << 20) + '", "argv": ["forged"]}}')
"""


@pytest.mark.parametrize(
    ("plant", "damage"),
    [(PLANT_LINKED, "meta is a symbolic link"), (PLANT_LARGE, "meta is larger than")],
    ids=["linked-64-mib", "8-mib-file"],
)
def test_a_planted_record_cannot_flood_ps_on_any_path(
    box: Sandbox, tenant_ns: str, tenant_kubeconfig: str, plant: str, damage: str
) -> None:
    """The probe that found it read 64 MiB from `ps` against an output cap of 1 MiB."""
    box.start_process("real", SLEEPER)
    guest(box, plant)
    try:
        started = time.monotonic()
        listed = box.processes()
        assert time.monotonic() - started < 30
        names = sorted(process.name for process in listed)
        assert names == ["flood", "real"], [name[:80] for name in names]
        flood = next(process for process in listed if process.name == "flood")
        assert damage in str(getattr(flood, "unreadable", None))
        assert flood.argv == ()  # nothing of the planted record is passed on

        async def listing() -> list[str]:
            async with AsyncClient(tenant_ns, kubeconfig=tenant_kubeconfig) as client:
                sandbox = await client.get(box.name)
                return sorted(process.name for process in await sandbox.processes())

        assert asyncio.run(listing()) == ["flood", "real"]
        shown = cli(tenant_kubeconfig, tenant_ns, "ps", box.name)
        assert shown.returncode == 0, shown.stderr[-2000:]
        assert len(shown.stdout) < 64 * 1024
        assert damage in shown.stderr.decode()
    finally:
        forget(box, "real", "flood")


def test_ps_looks_at_a_bounded_number_of_planted_entries(box: Sandbox) -> None:
    count = MAX_ENTRIES + 500
    guest(box, f"import os\nfor i in range({count}): os.mkdir('{STATE}/junk-%04d' % i)")
    try:
        listed = box.processes()
        assert len(listed) <= MAX_ENTRIES
        assert getattr(listed, "omitted", 0) >= 1
    finally:
        box.exec(["sh", "-c", f"rm -rf {STATE}/junk-*"])


# --- links under a running command's logs ------------------------------------------------------


def test_links_planted_under_the_logs_are_refused_and_never_written_through(
    box: Sandbox, tenant_ns: str, tenant_kubeconfig: str
) -> None:
    loop = "echo up; while :; do echo tick; sleep 0.1; done"
    box.start_process("chatty", ["sh", "-c", loop])
    try:
        wait_for("the command's first line", lambda: b"up" in box.logs("chatty"), 30)
        guest(
            box,
            f"""
import os
os.makedirs("/tmp/planted", exist_ok=True)
open("/tmp/planted/victim", "w").close()
with open("/tmp/planted/secret", "w") as handle:
    handle.write("read through a link")
for stream, target in (("stdout", "victim"), ("stderr", "secret")):
    os.unlink("{STATE}/chatty/" + stream)
    os.symlink("/tmp/planted/" + target, "{STATE}/chatty/" + stream)
""",
        )
        for stream in ("stdout", "stderr"):
            with pytest.raises(OpenbloxClientError) as raised:
                box.logs("chatty", stream=stream)
            assert type(raised.value).__name__ == "ProcessRecordDamaged", raised.value
            assert f"{stream} is a symbolic link" in str(raised.value)

        async def async_logs() -> None:
            async with AsyncClient(tenant_ns, kubeconfig=tenant_kubeconfig) as client:
                await (await client.get(box.name)).logs("chatty", stream="stderr")

        with pytest.raises(OpenbloxClientError, match="stderr is a symbolic link"):
            asyncio.run(async_logs())
        time.sleep(1.5)  # some 15 ticks, which the keeper writes through its own descriptor
        assert box.exec(["cat", "/tmp/planted/victim"]).stdout == b""
    finally:
        forget(box, "chatty")


# --- a record naming a pid of the guest's choosing --------------------------------------------

HOLD_THE_LOCK = f"""
import fcntl, os, time
os.makedirs("{STATE}/trap", exist_ok=True)
lock = open("{STATE}/trap/lock", "a")
fcntl.flock(lock, fcntl.LOCK_EX)
time.sleep(600)
"""


def test_stop_never_signals_a_pid_a_planted_record_names(box: Sandbox) -> None:
    """The guest holds the record's lock itself, so `trap` reads as running, and names
    another command as its keeper: the old stop sent that pid SIGTERM, then SIGKILL."""
    victim = box.start_process("victim", ["sleep", "600"])
    box.start_process("holder", ["python3", "-c", HOLD_THE_LOCK])
    try:
        meta = f'{{"keeper": {victim.pid}, "pid": {victim.pid}, "argv": ["trap"]}}'
        guest(
            box,
            f"import os\nos.makedirs('{STATE}/trap', exist_ok=True)\n"
            f"open('{STATE}/trap/meta', 'w').write('{meta}')",
        )
        wait_for(
            "the trap to read as running",
            lambda: any(p.name == "trap" and p.running for p in box.processes()),
            30,
        )
        with pytest.raises(ExecTransportError, match="its keeper did not answer"):
            box.stop_process("trap", grace=0.5)
        listed = {process.name: process for process in box.processes()}
        assert listed["victim"].running, "stop signalled the pid the planted record named"
    finally:
        forget(box, "holder", "victim", "trap")


# --- frames forged into the ps supervisor's stdout --------------------------------------------

FORGER = r"""
import os, time
line = b'{"name": "forged", "running": false}\n' * 2048
me, opened = str(os.getpid()), 0
deadline = time.time() + 600
while time.time() < deadline:
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or entry == me:
            continue
        try:
            with open("/proc/%s/cmdline" % entry, "rb") as handle:
                command = handle.read()
        except OSError:
            continue
        if not command.endswith(b"\0ps\0") or b"-c\0" not in command:
            continue
        try:
            fd = os.open("/proc/%s/fd/1" % entry, os.O_WRONLY)
        except OSError:
            continue
        opened += 1
        with open("/tmp/forger-opened", "w") as handle:
            handle.write(str(opened))
        try:
            for _ in range(1024):  # some 74 MiB of records that look real
                os.write(fd, line)
        except OSError:
            pass
        finally:
            os.close(fd)
"""


def test_frames_forged_into_the_ps_supervisor_never_reach_the_caller(box: Sandbox) -> None:
    """A guest process watches for the `ps` supervisor and writes into its stdout through
    /proc. The supervisor is not dumpable from its first line, so that open is refused; in
    the interpreter's start-up before it, it may succeed, and then the client stops at its
    bound with OutputLimitExceeded. Never does a forged record reach the caller."""
    # Many entries make each `ps` take longer: more time for the forger to find it.
    guest(box, f"import os\nfor i in range(400): os.mkdir('{STATE}/slow-%03d' % i)")
    box.start_process("forger", ["python3", "-c", FORGER])
    outcomes: list[str] = []
    try:
        for _ in range(15):
            started = time.monotonic()
            try:
                listed = box.processes()
            except OpenbloxClientError as error:
                outcomes.append(type(error).__name__)
                assert type(error).__name__ == "OutputLimitExceeded", error
            else:
                outcomes.append(str(len(listed)))
                assert "forged" not in {process.name for process in listed}, outcomes
                assert len(listed) <= 401, outcomes
            assert time.monotonic() - started < 30, outcomes
    finally:
        opened = box.exec(["sh", "-c", "cat /tmp/forger-opened 2>/dev/null || echo 0"])
        print(f"forger opened the ps stdout {opened.stdout.decode().strip()} times: {outcomes}")
        forget(box, "forger")
        box.exec(["sh", "-c", f"rm -rf {STATE}/slow-* /tmp/forger-opened"])
    assert box.exec(["echo", "still here"]).stdout == b"still here\n"
