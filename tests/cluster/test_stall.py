"""A sandbox whose node stalls, on the real embedded node.

gVisor's systrap platform runs each guest address space in a stub process on the host. When
a stub leaves the Sentry's interrupt unanswered for 5 s after the guest's context has
waited 30 s, the Sentry kills the stub's subprocess, and the guest process ends by SIGKILL
(or SIGSEGV). A node frozen for 30 s (`docker pause` of a kind node in the chaos run) or
starved of CPU does that to commands that were running: the exit is gVisor's, not the
command's, and SIGKILL would read as the memory limit. The client must say so instead.

The stall is made here the way a frozen node makes it, but for one pod only: its stub
processes (every descendant of its Sentry, not the Sentry) go into a cgroup v1 freezer of
their own for 40 s, then back where they were.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from openblox.client import Client, Sandbox, SandboxStalled
from tests.cluster.capacity import require_sandbox_room
from tests.cluster.kubectl import Kube
from tests.cluster.sandboxes import opted_in_namespace

pytestmark = pytest.mark.cluster

FREEZER = Path("/sys/fs/cgroup/freezer")
# Past gVisor's stuck-context timeout (30 s) and its checkup after an interrupt (5 s).
FREEZE_SECONDS = 40
# Threads that keep the guest's contexts queued for the frozen stub: gVisor only sends
# its interrupt, and so only finds a context stuck, while another waits behind it.
# Hashing a large buffer releases the GIL, so the threads run at once, not by turns.
SPINNER = """
import hashlib, threading, time
block = bytes(1 << 20)
def spin():
    end = time.time() + 45
    while time.time() < end:
        hashlib.sha256(block).digest()
threads = [threading.Thread(target=spin) for _ in range(4)]
for thread in threads:
    thread.start()
print("spinning", flush=True)
for thread in threads:
    thread.join()
print(42)
"""
# The kill depends on where gVisor's contexts are when the freeze begins: tries before
# the test says it could not make it happen.
ATTEMPTS = 4


@pytest.fixture
def stalling_box(operator: Kube) -> Iterator[tuple[Sandbox, int]]:
    if not (FREEZER / "cgroup.procs").exists():
        pytest.fail(
            f"this test freezes a pod's gVisor stubs through the cgroup v1 freezer "
            f"({FREEZER}), which this node does not have",
            pytrace=False,
        )
    require_sandbox_room(operator, "code-exec")
    with opted_in_namespace(operator, "t-stall") as namespace:
        sandbox = Client(namespace, kubeconfig=operator.kubeconfig).create("code-exec", "stall")
        pod = operator.get("pod", sandbox.status["podName"], namespace)
        yield sandbox, sentry_of(namespace, pod["metadata"]["name"], pod["metadata"]["uid"])
        sandbox.delete()


def sentry_of(namespace: str, pod: str, uid: str) -> int:
    """The pid of the pod's gVisor Sentry on this host: the `runsc-sandbox` process whose
    panic log lies in the pod's log directory."""
    marker = f"/var/log/pods/{namespace}_{pod}_{uid}/".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if argv[0] == b"runsc-sandbox" and any(marker in arg for arg in argv):
                return int(entry.name)
    pytest.fail(f"no runsc-sandbox process on this host serves pod {namespace}/{pod}")


def descendants(root: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = (entry / "stat").read_text()
                parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found: list[int] = []
    for pid in parents:
        ancestor = parents.get(pid)
        while ancestor is not None and ancestor not in (root, 0, 1):
            ancestor = parents.get(ancestor)
        if ancestor == root:
            found.append(pid)
    return found


@contextlib.contextmanager
def stubs_frozen(sentry: int) -> Iterator[list[int]]:
    """The Sentry's stub processes frozen in a freezer cgroup of their own; on the way
    out (whatever happened) thawed, moved back, and the cgroup removed."""
    home = next(
        line.split(":", 2)[2]
        for line in Path(f"/proc/{sentry}/cgroup").read_text().splitlines()
        if line.split(":", 2)[1] == "freezer"
    )
    cage = FREEZER / f"openblox-test-stall-{secrets.token_hex(3)}"
    cage.mkdir()
    moved: list[int] = []
    try:
        for pid in descendants(sentry):
            with contextlib.suppress(OSError):  # a stub that exited just now
                (cage / "cgroup.procs").write_text(str(pid))
                moved.append(pid)
        assert moved, f"the Sentry {sentry} has no stub processes to freeze"
        (cage / "freezer.state").write_text("FROZEN")
        yield moved
    finally:
        (cage / "freezer.state").write_text("THAWED")
        for left in (cage / "cgroup.procs").read_text().split():
            (FREEZER / home.lstrip("/") / "cgroup.procs").write_text(left)
        cage.rmdir()


def test_a_command_gvisor_ends_after_a_stall_is_sandbox_stalled(
    stalling_box: tuple[Sandbox, int],
) -> None:
    sandbox, sentry = stalling_box
    finished: list[str] = []
    for _ in range(ATTEMPTS):
        chunks = iter(sandbox.stream(["python3", "-c", SPINNER], timeout=60))
        assert next(chunks).data == b"spinning\n"
        try:
            with stubs_frozen(sentry):
                time.sleep(FREEZE_SECONDS)
            rest = b"".join(chunk.data for chunk in chunks)
        except SandboxStalled as stalled:
            assert stalled.signal in (9, 11), stalled
            assert FREEZE_SECONDS - 5 <= stalled.stalled < FREEZE_SECONDS + 30, stalled
            assert "stalled for" in str(stalled) and "most likely gVisor" in str(stalled)
            break
        finished.append(repr(rest))
    else:
        pytest.fail(
            f"gVisor did not end the command in {ATTEMPTS} freezes of {FREEZE_SECONDS} s "
            f"of its stubs; it finished with {finished}"
        )
    # Only the command ended: the sandbox, its pod and everything else in it live on.
    assert sandbox.exec(["python3", "-c", "print(6*7)"]).stdout == b"42\n"
