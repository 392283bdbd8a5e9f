"""Crashes and restarts, run last: they take parts of the embedded cluster down on purpose."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.cluster.kube import Kube
from tests.cluster.sandboxes import opt_in, sandbox, wait_reason

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
STATE = Path("/var/lib/openblox/cluster")


@pytest.fixture
def embedded(operator: Kube) -> Kube:
    if operator.kubeconfig != str(STATE / "admin.kubeconfig"):
        pytest.skip("crash recovery is a property of the embedded cluster, not of KUBECONFIG's")
    return operator


def _pid(component: str) -> int:
    return int((STATE / "run" / f"{component}.pid").read_text())


def _up() -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(REPO / "cluster" / "cluster.sh"), "up"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "PYTHON": os.environ.get("PYTHON", "python3")},
    )


def test_operator_recovers_after_the_api_server_restarts(embedded: Kube, namespace: str) -> None:
    opt_in(embedded, namespace)
    os.kill(_pid("kube-apiserver"), signal.SIGKILL)
    time.sleep(1)
    result = _up()
    assert result.returncode == 0, result.stderr
    assert "starting kube-apiserver" in result.stderr
    assert "starting etcd" not in result.stderr  # state survived: nothing else restarted
    embedded.apply(sandbox("after-restart", namespace))
    wait_reason(embedded, "after-restart", namespace, "Ready", timeout=180)


def test_up_after_a_crash_recovers_without_manual_steps(embedded: Kube) -> None:
    """Every component killed at once, as a power cut or a killed CI job leaves them:
    stale pid files, mounts of dead pods, CNI leases. `up` must simply work."""
    for component in (
        "kube-router",
        "kube-proxy",
        "kubelet",
        "kube-scheduler",
        "kube-controller-manager",
        "kube-apiserver",
        "etcd",
        "containerd",
    ):
        with contextlib.suppress(ProcessLookupError, FileNotFoundError):
            os.kill(_pid(component), signal.SIGKILL)
    time.sleep(1)
    result = _up()
    assert result.returncode == 0, result.stderr
    assert "cluster is up" in result.stderr
    namespace = f"t-after-crash-{int(time.time())}"
    embedded.kubectl("create", "namespace", namespace)
    # A fresh etcd: the operator and its policies are installed again, as `make up` does.
    import embedded as embedded_cluster

    embedded_cluster.install_operator(embedded.kubeconfig)
    opt_in(embedded, namespace)
    embedded.apply(sandbox("after-crash", namespace))
    body = wait_reason(embedded, "after-crash", namespace, "Ready", timeout=240)
    assert body["status"]["boundary"] == "gvisor"
    embedded.kubectl("delete", "namespace", namespace, "--wait=false")
