"""Tests on the three-node kind cluster the project builds (cluster/kind/kind.sh).

The session makes sure the cluster exists and runs this build's node image (creating it
the first time, reusing it after), then installs openblox as a user would: images pushed
to a local registry, `kubectl apply -k` of an install overlay naming them by digest.
Nothing here touches the embedded cluster.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "cluster"))

import embedded
from tests.cluster.kubectl import Kube

REPO = Path(__file__).resolve().parents[2]
KIND_SH = REPO / "cluster" / "kind" / "kind.sh"
GVISOR_LABEL = "openblox.sh/gvisor"


def kind_env() -> dict[str, str]:
    """KUBECONFIG and DOCKER_HOST of the kind cluster, from `kind.sh env`."""
    out = subprocess.run(
        [str(KIND_SH), "env"], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    found = {}
    for line in out.splitlines():
        name, _, value = line.removeprefix("export ").partition("=")
        found[name] = value
    return found


@pytest.fixture(scope="session")
def kind() -> Kube:
    subprocess.run(
        [str(KIND_SH), "up"],
        check=True,
        env={**os.environ, "PYTHON": sys.executable},
        stdout=subprocess.DEVNULL,
        timeout=3600,
    )
    return Kube(kind_env()["KUBECONFIG"])


@pytest.fixture(scope="session")
def kind_operator(kind: Kube) -> Kube:
    """openblox installed on the kind cluster from manifests/, as on any cluster."""
    embedded.install_operator(kind.kubeconfig)
    return kind


def docker(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Debian's docker CLI against the project's dockerd (the one kind's nodes run on)."""
    env = {**os.environ, "DOCKER_HOST": kind_env()["DOCKER_HOST"]}
    return subprocess.run(
        ["/usr/bin/docker", *args],
        capture_output=True,
        text=True,
        check=check,
        env=env,
        timeout=120,
    )
