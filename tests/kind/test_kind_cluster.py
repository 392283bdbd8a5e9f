"""The kind cluster itself, and where sandboxes may run on it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import pytest

import embedded
from openblox.names import LABEL_GVISOR_READY
from tests.cluster.kubectl import Kube
from tests.cluster.pod_shims import gofers_of, parse_ps, pod_containers, runsc_waits, shims_of
from tests.cluster.sandboxes import (
    get_sandbox,
    opted_in_namespace,
    ready_condition,
    sandbox,
    sandbox_pods,
    wait_for,
    wait_reason,
)
from tests.kind.conftest import GVISOR_LABEL, docker

pytestmark = pytest.mark.kind


def _local_registry() -> str:
    return (embedded.KIND_STATE / "registry-repository").read_text().strip() + "/"


def _nodes(kube: Kube) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(kube.kubectl("get", "nodes", "-o", "json").stdout)[
        "items"
    ]
    return items


def _gvisor_nodes(kube: Kube, label: str = GVISOR_LABEL) -> set[str]:
    return {
        n["metadata"]["name"]
        for n in _nodes(kube)
        if n["metadata"].get("labels", {}).get(label) == "true"
    }


def test_three_nodes_where_only_the_labelled_ones_have_gvisor(kind: Kube) -> None:
    nodes = {n["metadata"]["name"] for n in _nodes(kind)}
    gvisor = _gvisor_nodes(kind)

    assert len(nodes) == 3, nodes
    assert len(gvisor) == 2, gvisor
    for node in nodes:
        has_runsc = docker("exec", node, "test", "-x", "/usr/local/bin/runsc", check=False)
        handler = docker(
            "exec", node, "grep", "-q", "runtimes.runsc", "/etc/containerd/config.toml", check=False
        )
        assert (has_runsc.returncode == 0) == (node in gvisor), node
        assert (handler.returncode == 0) == (node in gvisor), node
        # No settings of the shim's own, no EROFS pause image: the shim runs as released.
        shim_config = docker("exec", node, "test", "-e", "/etc/containerd/runsc", check=False)
        assert shim_config.returncode == 1, node


def test_the_node_images_came_from_this_machine(kind_operator: Kube) -> None:
    """Nothing but the project's own images: those built into the node image or loaded into
    it (openblox.local/...), and openblox's, pulled by digest from the local registry
    kind.sh runs (docs/adr/0021). No other registry was ever reached. On a new kind
    cluster this is the first test to need openblox installed: it asks for the install."""
    kind = kind_operator
    ours = ("openblox.local/", _local_registry())
    pulled = set()
    for node in _nodes(kind):
        listed = docker("exec", node["metadata"]["name"], "crictl", "images", "-o", "json")
        images = json.loads(listed.stdout)["images"]
        names = {name for image in images for name in image["repoTags"]}
        assert names and all(name.startswith(ours) for name in names), names
        pulled |= {
            digest
            for image in images
            for digest in image["repoDigests"]
            if digest.startswith(_local_registry())
        }
    installed = {
        container["image"]
        for kind_, name, namespace in (
            ("deployment", "openblox-operator", "openblox-system"),
            ("daemonset", "openblox-node-agent", "openblox-node"),
        )
        for container in kind.get(kind_, name, namespace)["spec"]["template"]["spec"]["containers"]
    }
    assert installed and installed <= pulled, (installed, pulled)


def _openblox(kube: Kube, namespace: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "openblox.cli", "-n", namespace, *args],
        env={"KUBECONFIG": kube.kubeconfig, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_a_sandbox_prints_42_from_a_gvisor_node(kind_operator: Kube) -> None:
    with opted_in_namespace(kind_operator, "kind-42") as namespace:
        made = _openblox(kind_operator, namespace, "create", "answer")
        assert made.returncode == 0, made.stderr
        run = _openblox(
            kind_operator, namespace, "exec", "answer", "--", "python3", "-c", "print(6*7)"
        )

        assert run.returncode == 0, run.stderr
        assert run.stdout.strip() == "42"
        [pod] = sandbox_pods(kind_operator, namespace)
        assert pod["spec"]["runtimeClassName"] == "gvisor"
        node = pod["spec"]["nodeName"]
        assert node in _gvisor_nodes(kind_operator)
        # gVisor's shim as released (docs/kind.md, "The nodes"): no grouping, so each of
        # the pod's two containers (pause and the sandbox's) has a shim of its own, a
        # `runsc wait` and a gofer. The embedded node's patched shim has one shim for the
        # pod, no `runsc wait` and one gofer (docs/adr/0012 to 0014).
        pod_id, containers = pod_containers(
            lambda args: docker("exec", node, "crictl", *args).stdout,
            namespace,
            pod["metadata"]["name"],
        )
        ids = [pod_id, *containers]
        assert len(ids) == 2, ids
        ps = docker("exec", node, "ps", "-eo", "pid=,ppid=,args=").stdout
        processes = parse_ps(ps)
        served = shims_of(processes, ids)
        assert len({shim.pid for shim in served.values()}) == 2, served
        assert sorted(p.argv[-1] for p in runsc_waits(processes, ids)) == sorted(ids)
        assert set(gofers_of(processes, ids)) == set(ids)


def test_with_no_gvisor_node_free_the_sandbox_says_runtime_unavailable(
    kind_operator: Kube,
) -> None:
    gvisor = sorted(_gvisor_nodes(kind_operator))
    with opted_in_namespace(kind_operator, "kind-nogvisor") as namespace:
        try:
            for node in gvisor:
                kind_operator.kubectl("cordon", node)
            kind_operator.apply(sandbox("waits", namespace))
            started = time.monotonic()
            body = wait_reason(kind_operator, "waits", namespace, "RuntimeUnavailable", timeout=60)
            seconds = time.monotonic() - started
            assert "no node with gvisor can take the pod" in ready_condition(body)["message"]
            assert seconds < 30, f"the Sandbox said why only after {seconds:.0f}s"
            pods = sandbox_pods(kind_operator, namespace)
            # Nothing fell back: the one pod is bound to no node at all.
            assert len(pods) == 1 and not pods[0]["spec"].get("nodeName"), pods
            uid = pods[0]["metadata"]["uid"]
        finally:
            for node in gvisor:
                kind_operator.kubectl("uncordon", node)
        wait_reason(kind_operator, "waits", namespace, "Ready", timeout=180)
        pods = sandbox_pods(kind_operator, namespace)
        assert [p["metadata"]["uid"] for p in pods] == [uid], "a second pod was made"
        assert pods[0]["spec"]["nodeName"] in gvisor
        assert get_sandbox(kind_operator, "waits", namespace)


def test_a_cluster_with_no_gvisor_node_never_runs_a_sandbox_elsewhere(
    kind_operator: Kube,
) -> None:
    gvisor = sorted(_gvisor_nodes(kind_operator))
    with opted_in_namespace(kind_operator, "kind-unlabelled") as namespace:
        try:
            # As if no admin had labelled any node: no node agent runs, and the agents
            # that did take their nodes' ready label off as they stop.
            for node in gvisor:
                kind_operator.kubectl("label", "node", node, f"{GVISOR_LABEL}-")
            wait_for(
                "the node agents to take the ready label off",
                lambda: not _gvisor_nodes(kind_operator, LABEL_GVISOR_READY),
                timeout=60,
            )
            kind_operator.apply(sandbox("nowhere", namespace))
            body = wait_reason(kind_operator, "nowhere", namespace, "RuntimeUnavailable", 60)
            message = ready_condition(body)["message"]
            assert "3 node(s) didn't match Pod's node affinity/selector" in message, message
            wait_for(
                "the scheduler to keep the pod unbound",
                lambda: all(
                    not p["spec"].get("nodeName") for p in sandbox_pods(kind_operator, namespace)
                ),
                timeout=5,
            )
        finally:
            for node in gvisor:
                kind_operator.kubectl("label", "node", node, f"{GVISOR_LABEL}=true", "--overwrite")
            embedded.wait_for_prepared_nodes(kind_operator.kubeconfig, timeout=120)
