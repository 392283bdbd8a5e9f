"""Cluster tests run against a real API server and a real kubelet.

The session uses the cluster in KUBECONFIG when it answers; otherwise it starts the
embedded single-node cluster once (and leaves it running for the next session; `make
down` stops it). Every test gets a namespace of its own, deleted afterwards.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "cluster"))
import embedded
from tests.cluster.kubectl import Kube
from tests.cluster.sandboxes import (
    admission_has,
    extra_profiles,
    get_sandbox,
    opted_in_namespace,
    profile_yaml,
    sandbox,
    wait_for,
    wait_reason,
)

T = TypeVar("T")


def _or_fail(step: Callable[[], T]) -> T:
    """The embedded cluster's steps refuse with SystemExit (they are also a command).

    pytest does not keep a fixture's SystemExit as its result, so every later test would
    fail on pytest's own bookkeeping instead of the reason: each gets the reason instead.
    """
    try:
        return step()
    except SystemExit as refused:
        pytest.fail(f"the cluster is not usable: {refused.code}", pytrace=False)


@pytest.fixture(scope="session")
def kube() -> Kube:
    return Kube(_or_fail(embedded.ensure_cluster))


@pytest.fixture(scope="session")
def operator(kube: Kube) -> Kube:
    """The operator installed from manifests/ (`kubectl apply -k`), running the tree's image."""
    _or_fail(lambda: embedded.install_operator(kube.kubeconfig))
    return kube


@pytest.fixture
def namespace(kube: Kube, request: pytest.FixtureRequest) -> Iterator[str]:
    name = f"t-{request.node.name[:30].lower().replace('_', '-').strip('-')}-{uuid.uuid4().hex[:6]}"
    kube.kubectl("create", "namespace", name)
    yield name
    kube.kubectl("delete", "namespace", name, "--wait=false", check=False)


# A Sandbox that is not the suite's: made before any test, in a namespace of its own,
# left idle, and checked after the last test. Whatever a test deletes or restarts, this
# one must still be there (the same object) and Ready at the end: no test may wipe what
# it did not make, and a restart must give back what it took down. Its profile lives
# longer than the suite, so its own idle timeout never ends it first.
BYSTANDER_LIFETIME = {"idleTimeoutSeconds": 14_400, "maxAgeSeconds": 14_400}
# As little of the node as a Sandbox can hold, so the tests that need room still find it.
BYSTANDER_RESOURCES = {"cpu": "100m", "cpuRequest": "10m", "memory": "96Mi", "scratch": "16Mi"}
BYSTANDER_READY_AGAIN_SECONDS = 300


@pytest.fixture(scope="session", autouse=True)
def bystander(request: pytest.FixtureRequest) -> Iterator[None]:
    if not any(item.get_closest_marker("cluster") for item in request.session.items):
        yield  # no cluster test in this run
        return
    kube: Kube = request.getfixturevalue("operator")
    profile = f"bystander-{uuid.uuid4().hex[:6]}"
    with (
        extra_profiles(
            kube,
            {profile: profile_yaml(lifetime=BYSTANDER_LIFETIME, resources=BYSTANDER_RESOURCES)},
        ),
        opted_in_namespace(kube, "bystander") as namespace,
    ):
        wait_for("admission params", lambda: admission_has(kube, profile), 60)
        kube.apply(sandbox("idle", namespace, profile=profile))
        uid = wait_reason(kube, "idle", namespace, "Ready", 240)["metadata"]["uid"]
        yield
        body = get_sandbox(kube, "idle", namespace)
        assert body is not None, f"the bystander Sandbox {namespace}/idle is gone"
        assert body["metadata"]["uid"] == uid, "the bystander Sandbox was deleted and made again"
        wait_reason(kube, "idle", namespace, "Ready", BYSTANDER_READY_AGAIN_SECONDS)
