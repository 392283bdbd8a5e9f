"""Crashes and restarts, run last: they take the embedded cluster down on purpose, and
nothing a user made may be lost by it.

The cluster keeps its state in etcd's data directory. After `make down` and `make up`,
every component killed at once, or a reboot (processes and mounts gone, the data kept),
every object is still there and each Sandbox is Ready again; its pod is replaced, and
the pod's memory-backed `/workspace` is lost with it, as docs/production.md says. The
parts of `up` that recover a node (cleaning what a crash left, refusing etcd data it
cannot open) are tested on their own, on a node of their own under a temporary root.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from openblox.timestamps import parse_timestamp
from tests.cluster.kubectl import Kube
from tests.cluster.sandboxes import (
    extra_profiles,
    get_sandbox,
    opted_in_namespace,
    pod_of,
    profile_yaml,
    ready_condition,
    sandbox,
    wait_for,
    wait_reason,
)

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
CLUSTER_SH = REPO / "cluster" / "cluster.sh"
ROOT = Path("/var/lib/openblox")
STATE = ROOT / "cluster"
RUN = Path("/run/openblox")
DAEMONS = (
    "registry",
    "kube-router",
    "kube-proxy",
    "kubelet",
    "kube-scheduler",
    "kube-controller-manager",
    "kube-apiserver",
    "etcd",
    "containerd",
)


@pytest.fixture
def embedded(operator: Kube) -> Kube:
    if operator.kubeconfig != str(STATE / "admin.kubeconfig"):
        pytest.skip("crash recovery is a property of the embedded cluster, not of KUBECONFIG's")
    return operator


def _pid(component: str) -> int:
    return int((STATE / "run" / f"{component}.pid").read_text())


def _cluster(*command: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CLUSTER_SH), *command],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "PYTHON": os.environ.get("PYTHON", "python3"), **(env or {})},
    )


def _up() -> subprocess.CompletedProcess[str]:
    return _cluster("up")


def test_operator_recovers_after_the_api_server_restarts(embedded: Kube, namespace: str) -> None:
    embedded.kubectl("label", "namespace", namespace, "openblox.sh/sandboxes=enabled")
    os.kill(_pid("kube-apiserver"), signal.SIGKILL)
    time.sleep(1)
    result = _up()
    assert result.returncode == 0, result.stderr
    assert "starting kube-apiserver" in result.stderr
    assert "starting etcd" not in result.stderr  # state survived: nothing else restarted
    embedded.apply(sandbox("after-restart", namespace))
    wait_reason(embedded, "after-restart", namespace, "Ready", timeout=180)


# --- what a user made survives ----------------------------------------------------------


@dataclass(frozen=True)
class Made:
    """Objects a user made before the cluster went down, as they were."""

    namespace: str
    sandbox_uid: str
    pod_uid: str
    config: dict[str, str]
    profile: str


@contextlib.contextmanager
def _objects_of_a_user(kube: Kube, prefix: str) -> Iterator[Made]:
    """A namespace that opted in, a Sandbox with a file in /workspace, a ConfigMap of
    theirs, and a profile an admin added: all made before the restart."""
    profile = f"{prefix}-{os.urandom(2).hex()}"
    with (
        opted_in_namespace(kube, prefix) as namespace,
        extra_profiles(kube, {profile: profile_yaml(lifetime={"maxAgeSeconds": 3600})}),
    ):
        kube.apply(sandbox("kept", namespace))
        body = wait_reason(kube, "kept", namespace, "Ready", 180)
        pod = pod_of(kube, "kept", namespace)
        written = kube.exec(
            pod, namespace, "sh", "-c", "echo mine > /workspace/file", container="sandbox"
        )
        assert written.returncode == 0, written.stderr
        config = {"answer": "42", "when": str(time.time())}
        kube.apply(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "mine", "namespace": namespace},
                "data": config,
            }
        )
        yield Made(
            namespace,
            body["metadata"]["uid"],
            kube.get("pod", pod, namespace)["metadata"]["uid"],
            config,
            profile,
        )


def _started_since(kube: Kube, namespace: str, since: float) -> str | None:
    """The Sandbox's pod, once it reads Ready with its container started after `since`
    (a status written before the restart still says Ready until the operator is back)."""
    body = get_sandbox(kube, "kept", namespace) or {}
    name = (body.get("status") or {}).get("podName")
    if not name or ready_condition(body).get("reason") != "Ready":
        return None
    found = kube.kubectl("get", "pod", name, "-n", namespace, "-o", "json", check=False)
    if found.returncode != 0:
        return None
    for status in json.loads(found.stdout).get("status", {}).get("containerStatuses") or []:
        started = (status.get("state") or {}).get("running", {}).get("startedAt")
        fresh = started and parse_timestamp(started).timestamp() >= since - 1
        if status.get("name") == "sandbox" and status.get("ready") and fresh:
            return str(name)
    return None


def _all_there_and_ready_again(kube: Kube, made: Made, since: float) -> None:
    labels = kube.get("namespace", made.namespace)["metadata"]["labels"]
    assert labels.get("openblox.sh/sandboxes") == "enabled"
    assert kube.get("configmap", "mine", made.namespace)["data"] == made.config
    profiles = kube.get("configmap", "openblox-profiles", "openblox-system")["data"]
    assert made.profile in profiles
    # Its pod died with the node's processes: it was replaced, and what lived in its
    # memory-backed /workspace went with it (docs/production.md, "Restarts"). The kubelet
    # may first start the old pod again in place, which the operator then replaces under
    # the same name: an exec that finds no pod asks again.
    found = wait_for(
        "the Sandbox Ready again in a pod started since the restart, answering an exec",
        lambda: _workspace_file(kube, made.namespace, since),
        300,
        every=2,
    )
    assert found.returncode != 0 and "No such file" in found.stderr, found
    body = get_sandbox(kube, "kept", made.namespace) or {}
    assert body["metadata"]["uid"] == made.sandbox_uid, "the Sandbox was made again, not kept"


def _workspace_file(
    kube: Kube, namespace: str, since: float
) -> subprocess.CompletedProcess[str] | None:
    pod = _started_since(kube, namespace, since)
    if pod is None:
        return None
    found = kube.exec(pod, namespace, "cat", "/workspace/file", container="sandbox")
    gone = "pod does not exist" in found.stderr or "not found" in found.stderr
    return None if found.returncode != 0 and gone else found


def _wait_for_the_api(kube: Kube) -> None:
    wait_for(
        "the API server",
        lambda: kube.kubectl("get", "--raw", "/readyz", check=False).returncode == 0,
        120,
    )


def test_make_down_then_make_up_loses_no_object(embedded: Kube) -> None:
    with _objects_of_a_user(embedded, "t-down-up") as made:
        since = time.time()
        down = _cluster("down")
        assert down.returncode == 0, down.stderr
        assert "objects are kept" in down.stderr
        up = _up()
        assert up.returncode == 0, up.stderr
        _wait_for_the_api(embedded)
        _all_there_and_ready_again(embedded, made, since)


# This node's shims and gVisor sandboxes only, as `cluster.sh clean_node` finds them: the
# machine may run other containers (a kind cluster's nodes under Docker, their own runsc).
NODE_PROCESSES = (
    f"containerd-shim-run[a-z0-9-]* .*-address {RUN}/containerd/containerd.sock",
    f"{ROOT}/bin/runsc",
    f"runsc[a-z-]* .*--root={RUN}/runsc",
)


def _kill_daemons() -> None:
    for component in DAEMONS:
        with contextlib.suppress(ProcessLookupError, FileNotFoundError, ValueError):
            os.kill(_pid(component), signal.SIGKILL)


def test_every_component_killed_at_once_loses_no_object(embedded: Kube) -> None:
    """As a power cut or a killed CI job leaves them: stale pid files, mounts of dead
    pods, CNI leases. `up` simply works, and starts etcd on the same data."""
    with _objects_of_a_user(embedded, "t-crash") as made:
        since = time.time()
        _kill_daemons()
        time.sleep(1)
        result = _up()
        assert result.returncode == 0, result.stderr
        assert "cluster is up" in result.stderr
        _wait_for_the_api(embedded)
        _all_there_and_ready_again(embedded, made, since)


def test_a_reboot_loses_no_object(embedded: Kube) -> None:
    """Every process of the node gone (daemons, shims, sandboxes) and every mount under
    its directories with them; etcd's data kept, as a disk keeps it."""
    with _objects_of_a_user(embedded, "t-reboot") as made:
        since = time.time()
        _kill_daemons()
        for pattern in NODE_PROCESSES:
            subprocess.run(["pkill", "-KILL", "-f", pattern], check=False)
        mounts = [
            line.split()[1]
            for line in Path("/proc/mounts").read_text().splitlines()
            if line.split()[1].startswith((f"{ROOT}/", f"{RUN}/"))
        ]
        for mount in sorted(mounts, reverse=True):
            subprocess.run(["umount", "-l", mount], check=False)
        time.sleep(1)
        result = _up()
        assert result.returncode == 0, result.stderr
        _wait_for_the_api(embedded)
        _all_there_and_ready_again(embedded, made, since)


# --- the parts of `up` that recover a node, on a node of their own -------------------------


def _own_node(tmp_path: Path) -> dict[str, str]:
    """`cluster.sh` pointed at a root, a run directory and etcd ports of the test's own."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "etcd").symlink_to(ROOT / "bin" / "etcd")
    return {
        "OPENBLOX_ROOT": str(tmp_path),
        "OPENBLOX_RUN": str(tmp_path / "run"),
        "OPENBLOX_ETCD_CLIENT_PORT": "23790",
        "OPENBLOX_ETCD_PEER_PORT": "23800",
        "OPENBLOX_ETCD_METRICS_PORT": "23810",
    }


def _digest(directory: Path) -> dict[str, str]:
    return {
        str(path.relative_to(directory)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


def _dead_pid() -> int:
    ended = subprocess.Popen(["true"])
    ended.wait()
    return ended.pid


def _posing_as(argv0: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(["bash", "-c", f'exec -a "{argv0}" sleep 600'])


def test_a_crashed_node_is_cleaned_and_etcds_data_untouched(embedded: Kube, tmp_path: Path) -> None:
    env = _own_node(tmp_path)
    run = tmp_path / "run"
    etcd = tmp_path / "cluster" / "etcd" / "member" / "snap"
    etcd.mkdir(parents=True)
    (etcd / "db").write_bytes(os.urandom(65536))
    (tmp_path / "cluster" / "etcd.version").write_text("v3.6.16\n")
    kept_images = tmp_path / "containerd" / "io.containerd.content.v1.content" / "blob"
    kept_images.parent.mkdir(parents=True)
    kept_images.write_bytes(b"an image layer")
    seccomp = tmp_path / "kubelet" / "seccomp" / "openblox" / "sandbox.json"
    seccomp.parent.mkdir(parents=True)
    seccomp.write_text("{}")
    before = _digest(tmp_path / "cluster" / "etcd")
    # Stale pid files of daemons that died with the node.
    (tmp_path / "cluster" / "run").mkdir(parents=True)
    for name in ("etcd", "kubelet"):
        (tmp_path / "cluster" / "run" / f"{name}.pid").write_text(f"{_dead_pid()}\n")
    # A dead pod's memory-backed volume, still mounted.
    volume = tmp_path / "kubelet" / "pods" / "uid-1" / "volumes" / "kubernetes.io~empty-dir" / "w"
    volume.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(volume)], check=True)
    # The CNI lease of a pod that is gone, and a half-written containerd bundle.
    lease = tmp_path / "cni-ipam" / "openblox" / "10.244.0.9"
    lease.parent.mkdir(parents=True)
    lease.write_text("container-id\neth0")
    bundle = run / "containerd" / "io.containerd.runtime.v2.task" / "k8s.io" / "abc"
    bundle.mkdir(parents=True)
    (bundle / "config.json").write_text('{"ociVersion": "1.2.0", "proc')
    (run / "runsc" / "k8s.io").mkdir(parents=True)
    # A shim left of this node, and one of another node's that must be left alone.
    ours = _posing_as(f"containerd-shim-runsc-v1 -address {run}/containerd/containerd.sock")
    theirs = _posing_as("containerd-shim-runsc-v1 -address /run/elsewhere/containerd.sock")
    try:
        done = _cluster("clean-node", env=env)
        assert done.returncode == 0, done.stderr
        assert ours.wait(10) == -signal.SIGTERM
        assert theirs.poll() is None, "a process of another node was killed"
    finally:
        theirs.kill()
        ours.kill()
        subprocess.run(["umount", "-l", str(volume)], check=False)
    assert not list((tmp_path / "cluster" / "run").glob("*.pid"))
    assert str(volume) not in Path("/proc/mounts").read_text()
    assert not lease.exists() and not (run / "containerd").exists()
    assert not (run / "runsc").exists()
    assert not (tmp_path / "kubelet" / "pods").exists()
    assert _digest(tmp_path / "cluster" / "etcd") == before, "etcd's data was touched"
    assert kept_images.read_bytes() == b"an image layer" and seccomp.exists()


def _etcd_check(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return _cluster("etcd-check", env=env)


def _etcd_minor(offset: int) -> str:
    """A version `offset` minors from the pinned etcd's (cluster/versions.env)."""
    pinned = next(
        line.split("=", 1)[1].strip()
        for line in (REPO / "cluster" / "versions.env").read_text().splitlines()
        if line.startswith("ETCD_VERSION=")
    )
    major, minor = pinned.lstrip("v").split(".")[:2]
    return f"v{major}.{int(minor) + offset}.0"


def _stamped(version: str) -> Callable[[Path], object]:
    return lambda data: (data.parent / "etcd.version").write_text(f"{version}\n")


def _damaged_db(data: Path) -> object:
    return (data / "member" / "snap" / "db").write_bytes(os.urandom(16384))


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        (_stamped(_etcd_minor(-2)), f"written by etcd {_etcd_minor(-2)}"),
        (_stamped(_etcd_minor(+1)), f"written by etcd {_etcd_minor(+1)}"),
        (_stamped("yesterday"), "names no etcd version"),
        (_damaged_db, "invalid database"),
    ],
    ids=["two-minors-old", "newer", "garbled-stamp", "damaged-db"],
)
def test_etcd_data_it_cannot_open_stops_up_and_is_kept(
    embedded: Kube, tmp_path: Path, damage: Callable[[Path], object], says: str
) -> None:
    env = _own_node(tmp_path)
    data = tmp_path / "cluster" / "etcd"
    made = _etcd_check(env)
    assert made.returncode == 0, made.stderr
    assert (tmp_path / "cluster" / "etcd.version").read_text().strip().startswith("v3.")
    damage(data)
    before = _digest(data)
    refused = _etcd_check(env)
    assert refused.returncode != 0
    assert says in refused.stderr, refused.stderr
    assert "nothing was deleted" in refused.stderr and "make clean" in refused.stderr
    assert _digest(data) == before, "the data was touched"
    assert "Traceback" not in refused.stderr


def test_etcd_reopens_its_own_data(embedded: Kube, tmp_path: Path) -> None:
    env = _own_node(tmp_path)
    assert _etcd_check(env).returncode == 0
    again = _etcd_check(env)
    assert again.returncode == 0, again.stderr
    assert "etcd opened the data" in again.stderr


def test_only_reset_deletes_the_state_and_it_says_so(embedded: Kube, tmp_path: Path) -> None:
    """On a node of the test's own: `down` keeps etcd's data; `reset` (`make clean`)
    deletes it and says what it deletes. Both flush the node's network rules, so they run
    in a network namespace of their own (`unshare -n`), away from the real node's."""
    env = _own_node(tmp_path)
    assert _etcd_check(env).returncode == 0
    before = _digest(tmp_path / "cluster" / "etcd")
    down = _cluster_apart("down", env)
    assert down.returncode == 0, down.stderr
    assert _digest(tmp_path / "cluster" / "etcd") == before
    reset = _cluster_apart("reset", env)
    assert reset.returncode == 0, reset.stderr
    assert "every object it held" in reset.stderr
    assert not (tmp_path / "cluster" / "etcd").exists()


def _cluster_apart(command: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["unshare", "--net", str(CLUSTER_SH), command],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHON": os.environ.get("PYTHON", "python3"), **env},
    )
