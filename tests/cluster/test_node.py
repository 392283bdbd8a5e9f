"""The embedded node: gVisor with networking off, NetworkPolicy enforcement, fail-closed
runtimes. Each claim runs pods on the real kubelet and looks from inside them."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.kubectl import Kube

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
CLUSTER_SH = REPO / "cluster" / "cluster.sh"
IMAGE_REF_FILE = (
    Path(os.environ.get("OPENBLOX_CACHE", "/var/cache/openblox")) / "images" / "sandbox.ref"
)

LIST_INTERFACES = "import socket; print(' '.join(n for _, n in socket.if_nameindex()))"


def sandbox_image() -> str:
    return IMAGE_REF_FILE.read_text().strip()


def pod(
    name: str,
    namespace: str,
    *,
    runtime: str | None = None,
    command: list[str] | None = None,
    labels: dict[str, str] | None = None,
    containers: int = 1,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 1,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {"runAsUser": 1000, "runAsGroup": 1000, "runAsNonRoot": True},
        "containers": [
            {
                "name": f"c{i}",
                "image": sandbox_image(),
                "imagePullPolicy": "Never",
                "command": command or ["/bin/sleep", "infinity"],
                "volumeMounts": [{"name": "shared", "mountPath": "/shared"}],
            }
            for i in range(containers)
        ],
        "volumes": [{"name": "shared", "emptyDir": {"medium": "Memory", "sizeLimit": "8Mi"}}],
    }
    if runtime:
        spec["runtimeClassName"] = runtime
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {"test": name}},
        "spec": spec,
    }


def test_gvisor_pod_runs_the_gvisor_kernel_and_sees_only_loopback(
    kube: Kube, namespace: str
) -> None:
    kube.apply(pod("gv", namespace, runtime="gvisor"))
    running = kube.wait_pod("gv", namespace)
    node_kernel = kube.get("node", running["spec"]["nodeName"])["status"]["nodeInfo"][
        "kernelVersion"
    ]

    dmesg = kube.exec("gv", namespace, "dmesg", check=True).stdout
    assert "gVisor" in dmesg, dmesg
    release = kube.exec("gv", namespace, "uname", "-r", check=True).stdout.strip()
    assert release != node_kernel, f"the pod sees the host kernel {node_kernel}"
    interfaces = kube.exec("gv", namespace, "python3", "-c", LIST_INTERFACES, check=True).stdout
    assert interfaces.split() == ["lo"]


def test_runc_pod_shares_the_host_kernel_and_has_an_interface(kube: Kube, namespace: str) -> None:
    """The contrast that gives the gVisor test its meaning: runc shows the host's kernel."""
    kube.apply(pod("rc", namespace))
    running = kube.wait_pod("rc", namespace)
    node_kernel = kube.get("node", running["spec"]["nodeName"])["status"]["nodeInfo"][
        "kernelVersion"
    ]
    assert kube.exec("rc", namespace, "uname", "-r", check=True).stdout.strip() == node_kernel
    interfaces = kube.exec("rc", namespace, "python3", "-c", LIST_INTERFACES, check=True).stdout
    assert "eth0" in interfaces.split()


def test_gvisor_multi_container_pod_shares_volumes_and_execs(kube: Kube, namespace: str) -> None:
    kube.apply(pod("multi", namespace, runtime="gvisor", containers=2))
    kube.wait_pod("multi", namespace)
    kube.exec(
        "multi", namespace, "sh", "-c", "echo from-c0 > /shared/note", container="c0", check=True
    )
    seen = kube.exec("multi", namespace, "cat", "/shared/note", container="c1", check=True)
    assert seen.stdout == "from-c0\n"
    failed = kube.exec("multi", namespace, "sh", "-c", "exit 7", container="c1")
    assert failed.returncode == 7


def test_gvisor_containers_report_their_exit_code_and_the_signal_that_ended_them(
    kube: Kube, namespace: str
) -> None:
    """gVisor's shim learns a container's exit from the sandbox itself (docs/adr/0012): a
    process's own exit code, and 128 + the signal that ended it, reach the pod."""
    ends = pod("ends", namespace, runtime="gvisor", containers=2)
    ends["spec"]["restartPolicy"] = "Never"
    # The kubelet stops the pod here and sends c1 SIGTERM. gVisor delivers it to the
    # container's first process even without a handler (Linux would ignore it for a PID
    # namespace's init), so `sleep` ends by SIGTERM within the 1 s grace period.
    ends["spec"]["activeDeadlineSeconds"] = 20
    ends["spec"]["containers"][0]["command"] = ["sh", "-c", "exit 3"]
    kube.apply(ends)
    deadline = time.monotonic() + 120
    while True:
        status = kube.get("pod", "ends", namespace).get("status", {})
        ended = {
            c["name"]: c["state"]["terminated"]
            for c in status.get("containerStatuses", [])
            if "terminated" in c.get("state", {})
        }
        if len(ended) == 2:
            break
        assert time.monotonic() < deadline, f"containers still running: {status}"
        time.sleep(1)
    assert ended["c0"]["exitCode"] == 3, ended
    assert ended["c1"]["exitCode"] == 128 + 15, ended
    assert status["phase"] == "Failed", status


CONNECT = (
    "import socket,sys\n"
    "s=socket.socket(); s.settimeout(3)\n"
    "try:\n"
    "    s.connect((sys.argv[1], 8080)); s.sendall(b'GET / HTTP/1.0\\r\\n\\r\\n')\n"
    "    print('connected', s.recv(12))\n"
    "except OSError as e:\n"
    "    print('failed', e); sys.exit(1)\n"
)


def test_default_deny_network_policy_blocks_a_runc_pod(kube: Kube, namespace: str) -> None:
    kube.apply(
        pod(
            "canary",
            namespace,
            command=["python3", "-m", "http.server", "8080"],
            labels={"role": "canary"},
        )
    )
    kube.apply(pod("client", namespace, labels={"role": "client"}))
    canary_ip = kube.wait_pod("canary", namespace)["status"]["podIP"]
    kube.wait_pod("client", namespace)

    # The path works before the policy, so a failure afterwards is the policy's doing.
    before = _connect_until(kube, namespace, canary_ip, want_success=True)
    assert before.returncode == 0, before.stdout + before.stderr

    kube.apply(
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": "deny-client", "namespace": namespace},
            "spec": {
                "podSelector": {"matchLabels": {"role": "client"}},
                "policyTypes": ["Ingress", "Egress"],
            },
        }
    )
    after = _connect_until(kube, namespace, canary_ip, want_success=False)
    assert after.returncode == 1, after.stdout + after.stderr
    assert "failed" in after.stdout


def _connect_until(
    kube: Kube, namespace: str, ip: str, *, want_success: bool, seconds: float = 30
) -> subprocess.CompletedProcess[str]:
    """Policy controllers apply rules asynchronously; wait for the state to settle."""
    deadline = time.monotonic() + seconds
    while True:
        result = kube.exec("client", namespace, "python3", "-c", CONNECT, ip)
        if (result.returncode == 0) == want_success or time.monotonic() > deadline:
            return result
        time.sleep(1)


def test_pod_naming_a_missing_runtime_class_is_refused_at_admission(
    kube: Kube, namespace: str
) -> None:
    result = kube.apply(pod("nort", namespace, runtime="no-such-runtime"), check=False)
    assert result.returncode != 0
    assert 'RuntimeClass "no-such-runtime" not found' in result.stderr
    missing = kube.kubectl("get", "pod", "nort", "-n", namespace, check=False)
    assert missing.returncode != 0


def test_kata_pod_without_a_node_handler_fails_visibly_and_never_runs(
    kube: Kube, namespace: str
) -> None:
    kube.apply(pod("kata", namespace, runtime="kata"))
    deadline = time.monotonic() + 60
    reasons: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        reasons = [
            e for e in kube.events(namespace, "kata") if e["reason"] == "FailedCreatePodSandBox"
        ]
        if reasons:
            break
        time.sleep(1)
    assert reasons, "no FailedCreatePodSandBox event for a pod whose handler is missing"
    assert "kata" in reasons[0]["message"]
    status = kube.get("pod", "kata", namespace)["status"]
    assert status["phase"] == "Pending"
    assert not any(c.get("state", {}).get("running") for c in status.get("containerStatuses", []))


def run_cluster_sh(
    *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CLUSTER_SH), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
        check=False,
    )


def test_second_up_while_running_is_a_no_op_that_says_so(kube: Kube) -> None:
    result = run_cluster_sh("up")
    assert result.returncode == 0, result.stderr
    assert "already running" in result.stderr


def test_down_with_nothing_running_succeeds(tmp_path: Path) -> None:
    result = run_cluster_sh("down", env={"OPENBLOX_ROOT": str(tmp_path / "root")})
    assert result.returncode == 0, result.stderr
    assert "nothing to stop" in result.stderr


def test_up_names_a_missing_prerequisite_and_how_to_get_it(tmp_path: Path) -> None:
    """A PATH holding every tool but ipset stands in for a machine without it."""
    tools = tmp_path / "bin"
    tools.mkdir()
    for directory in (
        "/usr/local/sbin",
        "/usr/local/bin",
        "/usr/sbin",
        "/usr/bin",
        "/sbin",
        "/bin",
    ):
        for entry in Path(directory).iterdir() if Path(directory).is_dir() else []:
            target = tools / entry.name
            if entry.name != "ipset" and not target.exists():
                target.symlink_to(entry)
    go = Path("/usr/local/go/bin/go")
    if go.exists() and not (tools / "go").exists():
        (tools / "go").symlink_to(go)
    result = run_cluster_sh("up", env={"PATH": str(tools), "OPENBLOX_ROOT": str(tmp_path / "root")})
    assert result.returncode == 1
    assert "ipset (package ipset)" in result.stderr
    assert "install" in result.stderr
    assert not (tmp_path / "root").exists(), "a refused up must not have started anything"


def test_cluster_has_one_ready_node(kube: Kube) -> None:
    nodes = json.loads(kube.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    assert len(nodes) == 1
    ready = {c["type"]: c["status"] for c in nodes[0]["status"]["conditions"]}
    assert ready["Ready"] == "True"
