"""What goes wrong around the kind cluster, and that the embedded cluster keeps working."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator

import pytest

import embedded
from tests.cluster.kubectl import Kube
from tests.cluster.sandboxes import wait_for
from tests.cluster.test_node import CONNECT, pod
from tests.kind.conftest import KIND_SH, REPO, docker

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

    # kube-proxy programs a new Service asynchronously: the first connect right after
    # the Service is made can time out (seen once, on a cluster just restarted). Broken
    # traffic stays broken, so 30 s of attempts still fails it, with the last answer.
    answers: list[str] = []

    def connect() -> bool:
        reached = kube.exec("client", namespace, "python3", "-c", CONNECT, service_ip)
        answers.append(reached.stdout + reached.stderr)
        return reached.returncode == 0 and "connected" in reached.stdout

    try:
        wait_for(f"a connection to the Service at {service_ip}:8080", connect, 30, every=1)
    except AssertionError as error:
        raise AssertionError(f"{error}; the last attempt said: {answers[-1:]}") from None
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


def _node_images(kind: Kube) -> tuple[str, str]:
    """(the gVisor node image, the plain one) the running cluster's nodes were made from."""
    names = docker(
        "ps", "--filter", "label=io.x-k8s.kind.cluster=openblox", "--format", "{{.Image}}"
    )
    images = set(names.stdout.split())
    gvisor = [i for i in images if not i.endswith("-no-gvisor")]
    plain = [i for i in images if i.endswith("-no-gvisor")]
    assert len(gvisor) == 1 and len(plain) == 1, images
    return gvisor[0], plain[0]


def _check(*images: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(KIND_SH), "check", *images], capture_output=True, text=True, timeout=120, check=False
    )


def test_a_cluster_of_this_build_is_reused(kind: Kube) -> None:
    checked = _check(*_node_images(kind))

    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "reused" in checked.stdout


def test_a_cluster_left_by_another_build_is_named_stale_and_kept_until_up(kind: Kube) -> None:
    """What `kind.sh up` reads before it deletes and recreates a cluster of an older node
    image (docs/kind.md quotes the line it logs); `check` says it and
    changes nothing, so the running cluster is untouched."""
    gvisor, plain = _node_images(kind)
    before = docker("ps", "-q", "--filter", "label=io.x-k8s.kind.cluster=openblox").stdout

    checked = _check("openblox.local/kind-node:0000000000000000", plain)

    assert checked.returncode == 1
    assert f"runs {gvisor}, not this build's node image" in checked.stdout, checked.stdout
    assert docker("ps", "-q", "--filter", "label=io.x-k8s.kind.cluster=openblox").stdout == before
    assert embedded.reachable(kind.kubeconfig)


def test_a_node_that_is_not_running_makes_the_cluster_stale(kind: Kube) -> None:
    gvisor, plain = _node_images(kind)
    node = "openblox-worker2"  # no gVisor: frozen for a moment only
    docker("pause", node)
    try:
        checked = _check(gvisor, plain)
    finally:
        docker("unpause", node)

    assert checked.returncode == 1
    assert f"node {node} is not running (paused)" in checked.stdout, checked.stdout
