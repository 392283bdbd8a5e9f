"""Cluster tests run against a real API server and a real kubelet.

The session uses the cluster in KUBECONFIG when it answers; otherwise it starts the
embedded single-node cluster once (and leaves it running for the next session; `make
down` stops it). Every test gets a namespace of its own, deleted afterwards.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "cluster"))
import embedded
from tests.cluster.kube import Kube


@pytest.fixture(scope="session")
def kube() -> Kube:
    return Kube(embedded.ensure_cluster())


@pytest.fixture(scope="session")
def operator(kube: Kube) -> Kube:
    """The operator installed from manifests/ (`kubectl apply -k`), running the tree's image."""
    embedded.install_operator(kube.kubeconfig)
    return kube


@pytest.fixture
def namespace(kube: Kube, request: pytest.FixtureRequest) -> Iterator[str]:
    name = f"t-{request.node.name[:30].lower().replace('_', '-').strip('-')}-{uuid.uuid4().hex[:6]}"
    kube.kubectl("create", "namespace", name)
    yield name
    kube.kubectl("delete", "namespace", name, "--wait=false", check=False)
