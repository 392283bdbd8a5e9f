"""What goes wrong around the kind cluster, and that the embedded cluster keeps working."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator

import pytest

import embedded
from tests.cluster.kube import Kube
from tests.cluster.test_node import CONNECT, pod
from tests.kind.conftest import REPO

pytestmark = pytest.mark.kind

NODE_IMAGE_SH = REPO / "cluster" / "kind" / "node-image.sh"


@pytest.fixture
def embedded_namespace() -> Iterator[tuple[Kube, str]]:
    kube = Kube(embedded.ensure_cluster())
    name = f"t-kind-dockerd-{uuid.uuid4().hex[:6]}"
    kube.kubectl("create", "namespace", name)
    yield kube, name
    kube.kubectl("delete", "namespace", name, "--wait=false", check=False)


def test_the_embedded_cluster_keeps_pod_to_service_traffic_beside_kind(
    kind: Kube, embedded_namespace: tuple[Kube, str]
) -> None:
    """kind's nodes run on the project's dockerd (the `kind` fixture started it); the
    embedded cluster's pods still reach a Service, and Docker added no iptables rule."""
    kube, namespace = embedded_namespace
    kube.apply(
        pod(
            "server",
            namespace,
            command=["python3", "-m", "http.server", "8080"],
            labels={"app": "server"},
        )
    )
    kube.apply(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "server", "namespace": namespace},
            "spec": {"selector": {"app": "server"}, "ports": [{"port": 8080}]},
        }
    )
    kube.apply(pod("client", namespace))
    kube.wait_pod("server", namespace)
    kube.wait_pod("client", namespace)
    service_ip = kube.get("service", "server", namespace)["spec"]["clusterIP"]

    reached = kube.exec("client", namespace, "python3", "-c", CONNECT, service_ip)

    assert reached.returncode == 0 and "connected" in reached.stdout, (
        reached.stdout + reached.stderr
    )
    rules = subprocess.run(["iptables-save"], capture_output=True, text=True, check=True).stdout
    assert "DOCKER" not in rules, "dockerd installed iptables rules"


def test_no_docker_daemon_is_a_clear_error() -> None:
    built = subprocess.run(
        [str(NODE_IMAGE_SH)],
        env={**os.environ, "DOCKER_HOST": "unix:///nonexistent/docker.sock"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert built.returncode != 0
    assert "no Docker daemon answers at unix:///nonexistent/docker.sock" in built.stderr
    assert "cluster/docker.sh start" in built.stderr
