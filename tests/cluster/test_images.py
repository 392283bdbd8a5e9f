"""Images by digest from a registry (docs/adr/0021), on the embedded node: its containerd
resolves openblox.local to the project's registry on loopback (cluster/cluster.sh).

The install names every image by digest; a Sandbox whose profile names an image the node
lacks pulls it; one whose digest exists nowhere, or whose registry is down, is not Ready
and says which image could not be pulled, while what already runs keeps running."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import install_images
from tests.cluster.kubectl import Kube
from tests.cluster.sandboxes import (
    admission_has,
    extra_profiles,
    get_sandbox,
    installed_sandbox_image,
    opt_in,
    profile_yaml,
    ready_condition,
    sandbox,
    wait_for,
    wait_reason,
)

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
CLUSTER_SH = REPO / "cluster" / "cluster.sh"
REGISTRY = "127.0.0.1:5001"
REGISTRY_PID = Path("/var/lib/openblox/cluster/run/registry.pid")
SOCKET = "/run/openblox/containerd/containerd.sock"
CRICTL = ("/var/lib/openblox/bin/crictl", "--runtime-endpoint", f"unix://{SOCKET}")
# `crictl rmi` removes an image with every name it has: the installed sandbox image has the
# same config as the registry-only one, so only the one name is removed, with ctr.
CTR_RMI = ("/var/lib/openblox/bin/ctr", "--address", SOCKET, "-n", "k8s.io", "images", "rm")
SMALL = {"cpu": "200m", "cpuRequest": "20m", "memory": "128Mi", "scratch": "16Mi"}


@pytest.fixture
def sandboxes_ns(operator: Kube, namespace: str) -> str:
    opt_in(operator, namespace)
    return namespace


def _workload_containers(kube: Kube) -> list[dict[str, Any]]:
    found = []
    for kind, name, namespace in (
        ("deployment", "openblox-operator", "openblox-system"),
        ("deployment", "openblox-preview", "openblox-system"),
        ("daemonset", "openblox-node-agent", "openblox-node"),
    ):
        found += kube.get(kind, name, namespace)["spec"]["template"]["spec"]["containers"]
    return found


def test_the_install_names_every_image_by_digest(operator: Kube, sandboxes_ns: str) -> None:
    for container in _workload_containers(operator):
        assert "@sha256:" in container["image"], container
        assert container["imagePullPolicy"] == "IfNotPresent"
    profiles = operator.get("configmap", "openblox-profiles", "openblox-system")["data"]
    assert yaml.safe_load(profiles["code-exec"])["image"] == installed_sandbox_image()

    operator.apply(sandbox("pinned", sandboxes_ns))
    wait_reason(operator, "pinned", sandboxes_ns, "Ready", 180)
    pod = operator.get("pod", "pinned", sandboxes_ns)
    container = pod["spec"]["containers"][0]
    assert container["image"] == installed_sandbox_image()
    assert container["imagePullPolicy"] == "IfNotPresent"
    # The node runs the content the digest names: the image ID the kubelet reports is that
    # manifest's config (another manifest over the same config would report the same).
    image_id = pod["status"]["containerStatuses"][0]["imageID"]
    found = subprocess.run(
        [*CRICTL, "inspecti", "-o", "json", image_id], capture_output=True, check=True
    )
    assert json.loads(found.stdout)["status"]["id"] == _built_config_digest("sandbox")


def _built_config_digest(name: str) -> str:
    ref = (install_images.DEFAULT_CACHE / f"{name}.ref").read_text().strip()
    for record_file in install_images.DEFAULT_CACHE.glob(f"{name}-*.json"):
        record = json.loads(record_file.read_text())
        if record["ref"] == ref:
            return str(record["config"]["digest"])
    raise AssertionError(f"no build record for {ref}")


def test_kustomize_puts_every_image_in_a_users_registry(tmp_path: Path) -> None:
    """The one change a user makes: their registry in the overlay, the digests the same."""
    images = install_images.built_images(install_images.DEFAULT_CACHE, "registry.example:5000/ob")
    directory = tmp_path / "install"
    files = install_images.overlay(
        images,
        os.path.relpath(REPO / "manifests", directory),
        (REPO / "manifests" / "profiles.yaml").read_text(),
    )
    install_images.write_overlay(directory, files)

    rendered = subprocess.run(
        ["/var/lib/openblox/bin/kubectl", "kustomize", str(directory)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout

    documents = [doc for doc in yaml.safe_load_all(rendered) if doc]
    containers = [
        container
        for doc in documents
        if doc["kind"] in ("Deployment", "DaemonSet")
        for container in doc["spec"]["template"]["spec"]["containers"]
    ]
    assert {container["image"] for container in containers} == {
        images["operator"].reference,
        images["node-agent"].reference,
    }
    profiles = next(doc for doc in documents if doc["metadata"]["name"] == "openblox-profiles")
    for text in profiles["data"].values():
        assert yaml.safe_load(text)["image"] == images["sandbox"].reference


@pytest.fixture
def registry_only_image() -> Iterator[str]:
    """The sandbox image under a digest only the registry has (its manifest annotated, every
    blob the same), removed from the node and the registry afterwards."""
    archive = (install_images.DEFAULT_CACHE / "sandbox.archive").read_text().strip()
    marker = f"test-{secrets.token_hex(4)}"
    push = [sys.executable, str(REPO / "cluster" / "images" / "push.py"), archive, REGISTRY]
    digest = subprocess.run(
        [*push, "sandbox", "--annotate", f"sh.openblox.test={marker}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    image = f"{install_images.SOURCE_REGISTRY}/sandbox@{digest}"
    try:
        yield image
    finally:
        subprocess.run([*CTR_RMI, image], capture_output=True, check=False)
        _ensure_registry_running()
        request = urllib.request.Request(
            f"http://{REGISTRY}/v2/sandbox/manifests/{digest}", method="DELETE"
        )
        with urllib.request.urlopen(request, timeout=10):
            pass


def _node_has(image: str) -> bool:
    return (
        subprocess.run([*CRICTL, "inspecti", image], capture_output=True, check=False).returncode
        == 0
    )


def _registry_answers() -> bool:
    try:
        with urllib.request.urlopen(f"http://{REGISTRY}/v2/", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def _ensure_registry_running() -> None:
    if not _registry_answers():
        subprocess.run([str(CLUSTER_SH), "registry"], check=True, capture_output=True)
    assert _registry_answers(), "the project's registry did not come back"


def _pull_failure(kube: Kube, name: str, namespace: str) -> dict[str, Any]:
    def failed() -> dict[str, Any] | None:
        body = get_sandbox(kube, name, namespace) or {}
        condition = ready_condition(body)
        return condition if condition.get("reason") == "ImageNotPulled" else None

    condition: dict[str, Any] = wait_for(f"{name} to say its image was not pulled", failed, 120)
    return condition


def test_an_image_the_node_lacks_is_pulled_and_a_registry_down_is_named(
    operator: Kube, sandboxes_ns: str, registry_only_image: str
) -> None:
    assert not _node_has(registry_only_image)
    profile = f"pulled-{secrets.token_hex(3)}"
    with extra_profiles(
        operator, {profile: profile_yaml(image=registry_only_image, resources=SMALL)}
    ):
        wait_for("admission params", lambda: admission_has(operator, profile), 60)
        operator.apply(sandbox("running", sandboxes_ns))
        operator.apply(sandbox("pulled", sandboxes_ns, profile=profile))
        wait_reason(operator, "pulled", sandboxes_ns, "Ready", 180)
        wait_reason(operator, "running", sandboxes_ns, "Ready", 180)
        assert _node_has(registry_only_image)

        # The registry goes down, and the node no longer holds the image.
        subprocess.run([*CTR_RMI, registry_only_image], capture_output=True, check=True)
        assert not _node_has(registry_only_image)
        assert _node_has(installed_sandbox_image())
        pid = int(REGISTRY_PID.read_text())
        subprocess.run(["kill", str(pid)], check=True)
        try:
            wait_for("the registry to stop", lambda: not _registry_answers(), 30)
            operator.apply(sandbox("stranded", sandboxes_ns, profile=profile))
            condition = _pull_failure(operator, "stranded", sandboxes_ns)
            assert condition["status"] == "False"
            assert registry_only_image in condition["message"], condition
            assert "connection refused" in condition["message"], condition
            assert (
                ready_condition(get_sandbox(operator, "stranded", sandboxes_ns) or {})["status"]
                == "False"
            )
            # What already ran keeps running, and still runs commands.
            for running in ("running", "pulled"):
                body = get_sandbox(operator, running, sandboxes_ns) or {}
                assert ready_condition(body)["status"] == "True", (running, body.get("status"))
                done = operator.kubectl(
                    "exec", running, "-n", sandboxes_ns, "-c", "sandbox", "--", "echo", "alive"
                )
                assert done.stdout == "alive\n"
        finally:
            _ensure_registry_running()
        # The registry back: a new Sandbox from the same profile is Ready.
        operator.apply(sandbox("after", sandboxes_ns, profile=profile))
        wait_reason(operator, "after", sandboxes_ns, "Ready", 180)


def test_a_digest_no_registry_has_is_named_and_costs_nothing_else(
    operator: Kube, sandboxes_ns: str
) -> None:
    missing = f"{install_images.SOURCE_REGISTRY}/sandbox@sha256:{secrets.token_hex(32)}"
    profile = f"missing-{secrets.token_hex(3)}"
    with extra_profiles(operator, {profile: profile_yaml(image=missing, resources=SMALL)}):
        wait_for("admission params", lambda: admission_has(operator, profile), 60)
        operator.apply(sandbox("good", sandboxes_ns))
        operator.apply(sandbox("nowhere", sandboxes_ns, profile=profile))
        condition = _pull_failure(operator, "nowhere", sandboxes_ns)
        assert missing in condition["message"], condition
        assert "not found" in condition["message"], condition
        wait_reason(operator, "good", sandboxes_ns, "Ready", 180)
        events = json.loads(
            operator.kubectl(
                "get",
                "events",
                "-n",
                sandboxes_ns,
                "--field-selector",
                "involvedObject.name=nowhere",
                "-o",
                "json",
            ).stdout
        )["items"]
        assert any(missing in event.get("message", "") for event in events), [
            (event["reason"], event["message"]) for event in events
        ]
