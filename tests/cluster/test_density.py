"""Density on the real node: code-exec requests less CPU than its limit (Burstable), so
twenty idle Sandboxes are Ready at once on the 2-core embedded node, and a CPU request a
profile cannot have is refused where the admin sees it, with nothing running lost."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from openblox.models import parse_profile
from tests.cluster.capacity import require_sandbox_room
from tests.cluster.kubectl import Kube
from tests.cluster.pod_shims import (
    gofers_of,
    local_processes,
    pod_containers,
    runsc_waits,
    shims_of,
    shims_started_for,
)
from tests.cluster.sandboxes import (
    PROFILES,
    extra_profiles,
    opt_in,
    pod_of,
    profile_yaml,
    ready_condition,
    sandbox,
    sandbox_pods,
    wait_for,
    wait_reason,
)

pytestmark = pytest.mark.cluster

CRICTL = Path("/var/lib/openblox/bin/crictl")
CONTAINERD = "unix:///run/openblox/containerd/containerd.sock"
# Where cluster.sh has cluster/rootfs_erofs.py index the node's images of container rootfs.
ROOTFS_INDEX = Path("/run/containerd/runsc/rootfs-images")

IDLE_SANDBOXES = 20


@pytest.fixture
def sandboxes_ns(operator: Kube, namespace: str) -> str:
    opt_in(operator, namespace)
    return namespace


def _profile_text(kube: Kube, name: str) -> str:
    text: str = kube.get(*PROFILES[:2], PROFILES[2])["data"][name]
    return text


def _set_profile(kube: Kube, name: str, text: str) -> None:
    patch = json.dumps({"data": {name: text}})
    kube.kubectl("patch", *PROFILES[:2], "-n", PROFILES[2], "--type=merge", "-p", patch)


def _resources(pod: dict[str, Any]) -> dict[str, Any]:
    resources: dict[str, Any] = pod["spec"]["containers"][0]["resources"]
    return resources


def _ready(kube: Kube, namespace: str) -> set[str]:
    listing = json.loads(kube.kubectl("get", "sandboxes", "-n", namespace, "-o", "json").stdout)
    return {
        item["metadata"]["name"]
        for item in listing["items"]
        if ready_condition(item).get("status") == "True"
    }


def _not_ready(kube: Kube, namespace: str) -> str:
    """What each Sandbox not Ready says, and where its pod is, for a failure."""
    listing = json.loads(kube.kubectl("get", "sandboxes", "-n", namespace, "-o", "json").stdout)
    pods = {p["metadata"]["name"]: p for p in sandbox_pods(kube, namespace)}
    said = []
    for item in listing["items"]:
        condition = ready_condition(item)
        if condition.get("status") == "True":
            continue
        pod = pods.get(str((item.get("status") or {}).get("podName") or ""), {})
        said.append(
            f"{item['metadata']['name']}: {condition.get('reason')!r} {condition.get('message')!r}"
            f" (pod on {pod.get('spec', {}).get('nodeName')!r},"
            f" {pod.get('status', {}).get('phase')!r})"
        )
    return "not Ready: " + "; ".join(said)


def test_twenty_idle_code_exec_sandboxes_are_ready_on_one_node(
    operator: Kube, sandboxes_ns: str
) -> None:
    profile = parse_profile("code-exec", _profile_text(operator, "code-exec"))
    # The room is read from the pod the operator builds, so it counts the CPU request.
    require_sandbox_room(operator, "code-exec", IDLE_SANDBOXES, one_node=True)

    names = [f"dense-{index:02d}" for index in range(IDLE_SANDBOXES)]
    manifest = "\n---\n".join(json.dumps(sandbox(name, sandboxes_ns)) for name in names)
    operator.kubectl("apply", "-f", "-", stdin=manifest)
    try:
        try:
            # Within the suite's per-test timeout, so a failure can still say why.
            wait_for(
                f"{IDLE_SANDBOXES} Ready code-exec Sandboxes",
                lambda: _ready(operator, sandboxes_ns) >= set(names),
                timeout=480,
                every=3,
            )
        except AssertionError as error:
            raise AssertionError(f"{error}; {_not_ready(operator, sandboxes_ns)}") from None
        pods = sandbox_pods(operator, sandboxes_ns)
        assert sorted(p["metadata"]["labels"]["openblox.sh/sandbox"] for p in pods) == names
        assert len({p["spec"]["nodeName"] for p in pods}) == 1
        for pod in pods:
            resources = _resources(pod)
            assert pod["status"]["qosClass"] == "Burstable"
            assert resources["requests"]["cpu"] == profile.resources.effective_cpu_request.text
            assert resources["limits"]["cpu"] == profile.resources.cpu.text
            # Memory is requested at its limit, so eviction never ranks one as over it.
            assert resources["requests"]["memory"] == resources["limits"]["memory"]
    finally:
        operator.kubectl("delete", "sandboxes", "--all", "-n", sandboxes_ns, "--wait=false")


def _refusal_messages(kube: Kube) -> str:
    events = kube.events("openblox-system", "openblox-profiles")
    return " ".join(e["message"] for e in events if e["reason"] == "ProfileRefused")


def test_a_cpu_request_above_its_limit_is_refused_and_the_last_good_profile_serves(
    operator: Kube, sandboxes_ns: str
) -> None:
    good = _profile_text(operator, "code-exec")
    last_good = parse_profile("code-exec", good).resources
    operator.apply(sandbox("steady", sandboxes_ns))
    wait_reason(operator, "steady", sandboxes_ns, "Ready")
    steady_name = pod_of(operator, "steady", sandboxes_ns)
    steady_pod = operator.get("pod", steady_name, sandboxes_ns)["metadata"]["uid"]

    above = yaml.safe_load(good)
    above["resources"]["cpuRequest"] = f"{last_good.cpu.value + 100}m"
    wrong = {
        "test-cpu-negative": profile_yaml(resources={"cpu": "500m", "cpuRequest": "-50m"}),
        "test-cpu-words": profile_yaml(resources={"cpu": "500m", "cpuRequest": "half a core"}),
    }
    try:
        with extra_profiles(operator, wrong):
            _set_profile(operator, "code-exec", yaml.safe_dump(above))
            expected = (
                f'profile "code-exec" is invalid: resources.cpuRequest '
                f"{above['resources']['cpuRequest']} is above resources.cpu "
                f"{last_good.cpu.text}: a request can be at most the limit",
                "(its last good version stays in service)",
                'profile "test-cpu-negative" is invalid: resources.cpuRequest must be greater '
                "than zero, got -50m",
                'profile "test-cpu-words" is invalid: resources.cpuRequest: "half a core" is '
                "not a Kubernetes quantity",
            )

            def all_refused() -> bool:
                messages = _refusal_messages(operator)
                return all(part in messages for part in expected)

            wait_for("ProfileRefused events for every bad CPU request", all_refused, timeout=30)
            # A key that never had a good version is not offered at all.
            refused = operator.apply(
                sandbox("never", sandboxes_ns, profile="test-cpu-negative"), check=False
            )
            assert refused.returncode != 0
            assert 'profile "test-cpu-negative" does not exist' in refused.stderr

            # The last good code-exec still serves new Sandboxes, with its own request.
            operator.apply(sandbox("after", sandboxes_ns))
            wait_reason(operator, "after", sandboxes_ns, "Ready")
            after = pod_of(operator, "after", sandboxes_ns)
            resources = _resources(operator.get("pod", after, sandboxes_ns))
            assert resources["requests"]["cpu"] == last_good.effective_cpu_request.text
            assert resources["limits"]["cpu"] == last_good.cpu.text
            # And the Sandbox already running kept its pod.
            assert ready_condition(operator.get("sandbox", "steady", sandboxes_ns))["status"] == (
                "True"
            )
            assert operator.get("pod", steady_name, sandboxes_ns)["metadata"]["uid"] == steady_pod
    finally:
        _set_profile(operator, "code-exec", good)


def _crictl(args: Sequence[str]) -> str:
    command = [str(CRICTL), "--runtime-endpoint", CONTAINERD, *args]
    return subprocess.run(command, capture_output=True, text=True, check=True, timeout=60).stdout


def _index_text() -> str:
    try:
        return ROOTFS_INDEX.read_text()
    except OSError as error:
        return str(error)


def test_one_gvisor_shim_and_no_gofer_serve_a_pod_and_no_runsc_wait_runs(
    operator: Kube, sandboxes_ns: str
) -> None:
    """Shim grouping: the pause container and the sandbox's container share one
    containerd-shim-runsc-v1 (a shim per container costs about 6 MiB of host memory per
    Sandbox more). The patched shim waits for both without a `runsc wait` process each
    (about 3 MiB apiece; docs/adr/0012), and serves both containers' rootfs from the
    node's EROFS images, so neither has a gofer (about 5 MiB less each; docs/adr/0013,
    docs/adr/0014, docs/benchmarks density)."""
    require_sandbox_room(operator, "code-exec", 1)
    operator.apply(sandbox("grouped", sandboxes_ns))
    wait_for(
        "Sandbox grouped Ready",
        lambda: (
            ready_condition(operator.get("sandbox", "grouped", sandboxes_ns)).get("status")
            == "True"
        ),
    )
    pod_id, containers = pod_containers(
        _crictl, sandboxes_ns, pod_of(operator, "grouped", sandboxes_ns)
    )
    assert len(containers) == 1, containers
    processes = local_processes()
    pod_shim = shims_of(processes, [pod_id])[pod_id]
    assert shims_started_for(processes, [pod_id, *containers]) == [pod_shim]
    assert runsc_waits(processes, [pod_id, *containers]) == []
    assert gofers_of(processes, [pod_id, *containers]) == {}, (
        "a code-exec Sandbox's container should run from the node's EROFS image of the sandbox "
        f"image ({ROOTFS_INDEX}: {_index_text()!r})"
    )
