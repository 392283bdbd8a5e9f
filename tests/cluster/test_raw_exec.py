"""What holds for a process started with plain `kubectl exec`, with no openblox supervisor.

The process cap, the syscall filter and no_new_privs come from the pod (the NRI plugin's
RLIMIT_NPROC, the Localhost seccomp profile that runsc enforces, the container's
noNewPrivileges), so they hold however a command starts: docs/adr/0007.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import pytest

from tests.cluster.kubectl import Kube
from tests.cluster.sandboxes import (
    admission_has,
    extra_profiles,
    opt_in,
    profile_yaml,
    sandbox,
    wait_for,
    wait_reason,
)

pytestmark = pytest.mark.cluster

CAP = 48

FORK_LOOP = """
import errno, json, os, resource, signal, time
children, error = [], None
for _ in range(400):
    try:
        pid = os.fork()
    except OSError as e:
        error = errno.errorcode[e.errno]
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    children.append(pid)
for pid in children:
    os.kill(pid, signal.SIGKILL)
for pid in children:
    os.waitpid(pid, 0)
print(json.dumps({"started": len(children), "error": error,
                  "limit": resource.getrlimit(resource.RLIMIT_NPROC)}))
"""

NAMESPACES = """
import ctypes, errno, json, os, threading
libc = ctypes.CDLL(None, use_errno=True)
def call(*args):
    result = libc.syscall(*args)
    return "ok" if result >= 0 else errno.errorcode[ctypes.get_errno()]
CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWNET, SIGCHLD = 0x10000000, 0x20000, 0x40000000, 17
seen = {
    "unshare(CLONE_NEWUSER)": call(272, CLONE_NEWUSER),
    "unshare(CLONE_NEWNS)": call(272, CLONE_NEWNS),
    "clone(CLONE_NEWUSER)": call(56, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0),
    "clone(CLONE_NEWNET)": call(56, CLONE_NEWNET | SIGCHLD, 0, 0, 0, 0),
    "clone3": call(435, 0, 0),
    "setns": call(308, 0, 0),
    "mount": call(165, b"none", b"/tmp", b"tmpfs", 0, 0),
    "bpf": call(321, 0, 0, 0),
    "ptrace(TRACEME)": call(101, 0, 0, 0, 0),
}
thread = threading.Thread(target=lambda: None)
thread.start()
thread.join()
status = dict(line.split(":\\t", 1) for line in open("/proc/self/status").read().splitlines()
              if ":\\t" in line)
seen["thread"] = "ok"
seen["Seccomp"] = status.get("Seccomp", "").strip()
seen["NoNewPrivs"] = status.get("NoNewPrivs", "").strip()
print(json.dumps(seen))
"""


def _exec(kube: Kube, namespace: str, pod: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return kube.kubectl("exec", pod, "-n", namespace, "-c", "sandbox", "--", *argv, check=False)


@pytest.fixture
def capped(operator: Kube, namespace: str) -> Iterator[str]:
    """A Ready Sandbox of a profile whose cap differs from every default."""
    opt_in(operator, namespace)
    with extra_profiles(operator, {"test-nproc": profile_yaml(resources={"processes": CAP})}):
        wait_for("admission params", lambda: admission_has(operator, "test-nproc"), 30)
        operator.apply(sandbox("capped", namespace, profile="test-nproc"))
        wait_reason(operator, "capped", namespace, "Ready", timeout=180)
        yield namespace


def test_a_fork_loop_through_plain_kubectl_exec_stops_at_the_profiles_process_cap(
    operator: Kube, capped: str
) -> None:
    done = _exec(operator, capped, "capped", "python3", "-c", FORK_LOOP)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["limit"] == [CAP, CAP]
    assert result["error"] == "EAGAIN"
    # Every task of uid 1000 in the pod counts (the image's init, its sleep, this python,
    # tasks still exiting), so fewer than the cap start, never more.
    assert 1 <= result["started"] <= CAP - 1, result
    # The sandbox still runs commands afterwards.
    assert _exec(operator, capped, "capped", "true").returncode == 0


@pytest.fixture
def box(operator: Kube, namespace: str) -> str:
    opt_in(operator, namespace)
    operator.apply(sandbox("raw", namespace))
    wait_reason(operator, "raw", namespace, "Ready", timeout=180)
    return namespace


def test_new_namespaces_mounts_and_bpf_through_plain_kubectl_exec_are_refused(
    operator: Kube, box: str
) -> None:
    done = _exec(operator, box, "raw", "python3", "-c", NAMESPACES)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    for call in (
        "unshare(CLONE_NEWUSER)",
        "unshare(CLONE_NEWNS)",
        "clone(CLONE_NEWUSER)",
        "clone(CLONE_NEWNET)",
        "setns",
        "mount",
        "bpf",
        "ptrace(TRACEME)",
    ):
        assert seen[call] == "EPERM", (call, seen)
    # clone3 answers ENOSYS, so glibc falls back to clone and threads still start.
    assert seen["clone3"] == "ENOSYS" and seen["thread"] == "ok", seen
    assert seen["Seccomp"] == "2" and seen["NoNewPrivs"] == "1", seen
    # The same from a grandchild that left the exec's session.
    nested = _exec(operator, box, "raw", "sh", "-c", f"setsid python3 -c '{NAMESPACES}' | cat")
    assert json.loads(nested.stdout.splitlines()[-1])["unshare(CLONE_NEWUSER)"] == "EPERM"


NOEXEC = """
import ctypes, json, mmap, os, shutil, subprocess
def refused(argv):
    try:
        return subprocess.run(argv, capture_output=True).returncode != 0
    except PermissionError:
        return True
seen = {}
for where in ("/tmp", "/workspace", "/dev/shm"):
    copy = where + "/t"
    shutil.copy("/bin/true", copy)
    os.chmod(copy, 0o755)
    seen[where + " exec"] = refused([copy])
    seen[where + " ld.so"] = refused(["/lib64/ld-linux-x86-64.so.2", copy])
    with open(copy, "rb") as f:
        try:
            mmap.mmap(f.fileno(), 4096, prot=mmap.PROT_READ | mmap.PROT_EXEC)
            seen[where + " mmap exec"] = False
        except PermissionError:
            seen[where + " mmap exec"] = True
    os.unlink(copy)
fd = os.memfd_create("brought-in")
os.write(fd, open("/bin/true", "rb").read())
seen["memfd exec runs"] = subprocess.run([f"/proc/self/fd/{fd}"], pass_fds=[fd]).returncode == 0
print(json.dumps(seen))
"""


def test_noexec_stops_running_scratch_files_but_not_brought_in_code(
    operator: Kube, box: str
) -> None:
    done = _exec(operator, box, "raw", "python3", "-c", NOEXEC)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    refused = {k: v for k, v in seen.items() if k != "memfd exec runs"}
    assert all(refused.values()), seen
    # What THREAT_MODEL.md says noexec does not stop. If this starts failing, the
    # documents can say more than they do today.
    assert seen["memfd exec runs"] is True, seen
