"""The stated minimum, enforced: `make up` refuses an API server older than Kubernetes 1.30
(or one without ValidatingAdmissionPolicy v1) before it applies anything, the operator
waits on one instead of crash-looping, and this cluster itself meets the minimum.

An older API server is the real one behind tests/cluster/pretending_proxy.py, which
rewrites `/version` or the admission discovery document and nothing else.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from openblox.models.cluster_support import (
    ADMISSION_DISCOVERY_PATH,
    MINIMUM_KUBERNETES,
    VERSION_PATH,
    errors,
    kubernetes_version,
    node_findings,
    server_findings,
)
from openblox.names import LABEL_GVISOR_NODE, OPERATOR, OPERATOR_NAMESPACE, RUNTIME_HANDLER_GVISOR
from tests.cluster.kubectl import Kube
from tests.cluster.pretending_proxy import (
    PretendingProxy,
    Rewrite,
    older,
    without_admission_policies,
)
from tests.cluster.sandboxes import wait_for

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
EMBEDDED_PY = REPO / "cluster" / "embedded.py"


def installed(kube: Kube) -> dict[str, Any]:
    """What an install would change first: the operator's Deployment and its ClusterRole."""
    deployment = kube.get("deployment", OPERATOR, OPERATOR_NAMESPACE)["metadata"]
    role = kube.get("clusterrole", OPERATOR)["metadata"]
    return {
        "deployment": (deployment["generation"], deployment["resourceVersion"]),
        "clusterrole": role["resourceVersion"],
    }


def make_up(kubeconfig: str) -> subprocess.CompletedProcess[str]:
    """What `make up` runs once its build step is done, against `kubeconfig`."""
    return subprocess.run(
        [sys.executable, str(EMBEDDED_PY), "up"],
        env={**os.environ, "KUBECONFIG": kubeconfig},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def refused_install(operator: Kube, tmp_path: Path, rewrite: Rewrite) -> str:
    """Run `make up` through a pretending proxy; assert it refused, wrote nothing and
    changed nothing; its stderr."""
    operator.kubectl(
        "rollout", "status", f"deployment/{OPERATOR}", "-n", OPERATOR_NAMESPACE, "--timeout=180s"
    )
    before = installed(operator)
    with PretendingProxy(operator.kubeconfig, rewrite) as proxy:
        result = make_up(proxy.kubeconfig(tmp_path))
    assert result.returncode != 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.rstrip().endswith("nothing was installed"), result.stderr
    assert proxy.methods == {"GET"}, f"the refused install sent more than reads: {proxy.requests}"
    assert installed(operator) == before
    return result.stderr


def test_make_up_refuses_an_api_server_older_than_the_minimum(
    operator: Kube, tmp_path: Path
) -> None:
    stderr = refused_install(operator, tmp_path, older("v1.29.0"))
    assert "openblox needs Kubernetes 1.30 or newer (ValidatingAdmissionPolicy" in stderr
    assert "is v1.29.0; nothing was installed" in stderr


def test_make_up_refuses_an_api_server_without_admission_policy_v1(
    operator: Kube, tmp_path: Path
) -> None:
    stderr = refused_install(operator, tmp_path, without_admission_policies)
    assert (
        "does not serve validatingadmissionpolicies, validatingadmissionpolicybindings "
        "in admissionregistration.k8s.io/v1"
    ) in stderr


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _healthz(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as answer:
        return int(answer.status)


def test_the_operator_waits_on_an_older_api_server_and_says_why(
    operator: Kube, namespace: str, tmp_path: Path
) -> None:
    """The operator's program, run here against the pretending proxy, as its Pod would
    run against an older API server: no crash, /healthz answering, one Warning Event on
    its Pod. It waits before kopf starts, so it watches and writes nothing else."""
    pod_name = f"gate-{uuid.uuid4().hex[:8]}"
    health, metrics = _free_port(), _free_port()
    with PretendingProxy(operator.kubeconfig, older("v1.29.0")) as proxy:
        env = {
            **os.environ,
            "KUBECONFIG": proxy.kubeconfig(tmp_path, namespace),
            "POD_NAME": pod_name,
        }
        env.pop("KUBERNETES_SERVICE_HOST", None)
        program = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "openblox.controller",
                f"--liveness=http://127.0.0.1:{health}/healthz",
                f"--metrics-port={metrics}",
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            event = wait_for(
                "the UnsupportedKubernetes Event",
                lambda: next(
                    (
                        e
                        for e in operator.events(namespace, pod_name)
                        if e["reason"] == "UnsupportedKubernetes"
                    ),
                    None,
                ),
                timeout=60,
            )
            assert event["type"] == "Warning"
            assert event["involvedObject"]["kind"] == "Pod"
            assert "openblox needs Kubernetes 1.30 or newer" in event["message"]
            assert event["message"].endswith(
                "is v1.29.0; the operator waits, and checks again every 60 s"
            )
            assert wait_for("/healthz", lambda: _ok(health), timeout=30)
            time.sleep(5)  # a crash would have come by now
            assert program.poll() is None, "the operator exited on an older API server"
            assert _healthz(health) == 200
            # Its checks, its Pod, the one Event: kopf never started (no list, no watch).
            assert proxy.paths <= {
                VERSION_PATH,
                ADMISSION_DISCOVERY_PATH,
                f"/api/v1/namespaces/{namespace}/pods/{pod_name}",
                f"/api/v1/namespaces/{namespace}/events",
            }, proxy.requests
        finally:
            program.terminate()
            output, _ = program.communicate(timeout=30)
    assert output.count("openblox needs Kubernetes 1.30 or newer") == 1, output


def _ok(port: int) -> bool:
    try:
        return _healthz(port) == 200
    except OSError:
        return False


def test_this_cluster_meets_the_minimum(operator: Kube) -> None:
    """The cluster under test passes the checks it would refuse another for: its API
    server, and every gVisor node's containerd and runsc handler (as far as reported)."""
    version = json.loads(operator.kubectl("get", "--raw", VERSION_PATH).stdout)
    found = kubernetes_version(version)
    assert found is not None and found >= MINIMUM_KUBERNETES, version
    discovery = json.loads(operator.kubectl("get", "--raw", ADMISSION_DISCOVERY_PATH).stdout)
    assert server_findings(version, discovery, "this cluster") == []
    node_list = json.loads(operator.kubectl("get", "nodes", "-o", "json").stdout)
    assert errors(node_findings(node_list)) == []
    gvisor = [
        n for n in node_list["items"] if n["metadata"]["labels"].get(LABEL_GVISOR_NODE) == "true"
    ]
    assert gvisor, f"no node labelled {LABEL_GVISOR_NODE}=true"
    for node in gvisor:
        assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")
        handlers = [h.get("name") for h in node["status"].get("runtimeHandlers") or []]
        if handlers:
            assert RUNTIME_HANDLER_GVISOR in handlers, (node["metadata"]["name"], handlers)
