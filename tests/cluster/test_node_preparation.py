"""What the node must give a sandbox pod, read from inside real pods on the real node by
the operator's own probe script and judged by its own code (`models/node_preparation.py`).

A node the project did not prepare is made here without touching the node: a plain
gVisor pod whose container is not named `sandbox`, so the NRI plugin leaves it as the
kubelet and runsc made it. The same check that passes in a Sandbox's pod must name, in
that one, everything the plugin would have given it.
"""

from __future__ import annotations

from typing import Any

import pytest

from openblox.controller.boundary import PROBE_COMMAND
from openblox.models.boundary import classify_boundary
from openblox.models.node_preparation import (
    ProbeReport,
    requirements_of,
    split_probe_output,
    unmet_requirements,
)
from tests.cluster.capacity import require_sandbox_room
from tests.cluster.kubectl import Kube
from tests.cluster.sandboxes import opt_in, pod_of, sandbox, wait_reason

pytestmark = pytest.mark.cluster


def _probe(kube: Kube, namespace: str, pod: str, container: str) -> ProbeReport:
    result = kube.exec(pod, namespace, *PROBE_COMMAND, container=container)
    assert result.returncode == 0, f"the probe failed in {namespace}/{pod}: {result.stderr[-400:]}"
    return split_probe_output(result.stdout, exited_cleanly=True)


def _unprepared_twin(pod: dict[str, Any], name: str) -> dict[str, Any]:
    """The Sandbox pod's spec, as a pod of its own that no NRI plugin adjusts."""
    spec = {
        key: value
        for key, value in pod["spec"].items()
        if key not in ("nodeName", "serviceAccount", "serviceAccountName", "priority")
    }
    spec["containers"] = [{**spec["containers"][0], "name": "plain"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": pod["metadata"]["namespace"]},
        "spec": spec,
    }


def test_the_probe_passes_a_prepared_pod_and_names_each_lack_of_an_unprepared_one(
    operator: Kube, namespace: str
) -> None:
    require_sandbox_room(operator, "code-exec", 2)
    opt_in(operator, namespace)
    operator.apply(sandbox("prepared", namespace))
    wait_reason(operator, "prepared", namespace, "Ready")
    pod = operator.get("pod", pod_of(operator, "prepared", namespace), namespace)
    needs = requirements_of(pod, "gvisor")
    assert needs is not None
    node = operator.get("node", pod["spec"]["nodeName"])["status"]["nodeInfo"]["kernelVersion"]

    prepared = _probe(operator, namespace, pod["metadata"]["name"], "sandbox")
    assert prepared.complete
    assert classify_boundary(prepared.release, "", node, prepared.version) == "gvisor"
    assert unmet_requirements(prepared, needs) == ()

    operator.apply(_unprepared_twin(pod, "unprepared"))
    operator.wait_pod("unprepared", namespace)
    bare = _probe(operator, namespace, "unprepared", "plain")
    # Its kernel is gVisor all the same: the old check let exactly this pod through.
    assert classify_boundary(bare.release, "", node, bare.version) == "gvisor"
    unmet = unmet_requirements(bare, needs)
    for directory in ("/tmp", "/workspace", "/run/openblox", "/dev/shm"):
        assert f"{directory} is mounted without noexec,nosuid" in unmet, unmet
    assert "/dev/shm has no size bound" in unmet, unmet
    assert any(line.startswith("RLIMIT_NPROC is unlimited") for line in unmet), unmet
    # And what it says is so: a program copied into its /tmp runs there.
    copied = operator.exec(
        "unprepared",
        namespace,
        "/bin/sh",
        "-c",
        "cp /bin/true /tmp/t && /tmp/t && echo ran",
        container="plain",
    )
    assert "ran" in copied.stdout, copied.stderr
