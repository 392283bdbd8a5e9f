"""What a node must give a sandbox pod, read from inside the pod in the boundary probe's
one exec. The probe outputs under data/probe/ are real: the probe's `cat` run in a
Sandbox's pod on the embedded gVisor node (prepared: the NRI plugin adjusted it) and in a
plain gVisor pod on the same node whose container the plugin leaves alone (unprepared)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from openblox.builders.pod import build_pod, pod_name
from openblox.controller import pod_boundaries
from openblox.controller.boundary import ProbeVerdict
from openblox.controller.reconcile import Reconciler
from openblox.controller.sandbox_cache import SandboxCache
from openblox.controller.unprepared_nodes import HOLD_SECONDS
from openblox.controller.watched import Watched
from openblox.models import parse_profile
from openblox.models.boundary import classify_boundary
from openblox.models.node_preparation import (
    NodeRequirements,
    requirements_of,
    split_probe_output,
    unmet_requirements,
)
from tests.unit.factories import IMAGE_LINE, make_sandbox
from tests.unit.test_operator_loop import (
    NOW,
    FakeKube,
    _cached,
    _operator,
    _ready,
    _watch_everything,
)

DATA = Path(__file__).parent / "data" / "probe"
NEEDS = NodeRequirements(
    mount_bytes={
        "/tmp": 128 << 20,
        "/workspace": 128 << 20,
        "/run/openblox": 16 << 20,
        "/dev/shm": 64 << 20,
    },
    processes=256,
    only_loopback=True,
)


def _split(text: str) -> Any:
    return split_probe_output(text, exited_cleanly=True)


def _report(name: str) -> Any:
    return _split((DATA / name).read_text())


def test_a_prepared_gvisor_pod_meets_every_requirement() -> None:
    report = _report("gvisor-prepared.txt")
    assert report.complete
    assert classify_boundary(report.release, "", "6.1.0", report.version) == "gvisor"
    assert unmet_requirements(report, NEEDS) == ()


def test_a_pod_its_node_did_not_prepare_is_told_apart_and_each_lack_is_named() -> None:
    report = _report("gvisor-unprepared.txt")
    # Still gVisor: the kernel alone would have let it through.
    assert classify_boundary(report.release, "", "6.1.0", report.version) == "gvisor"
    assert unmet_requirements(report, NEEDS) == (
        "/tmp is mounted without noexec,nosuid",
        "/workspace is mounted without noexec,nosuid",
        "/run/openblox is mounted without noexec,nosuid",
        "/dev/shm is mounted without noexec,nosuid",
        "/dev/shm has no size bound",
        "RLIMIT_NPROC is unlimited, not the profile's 256",
    )


def test_sizes_above_the_profiles_an_interface_besides_lo_and_a_missing_mount_are_named() -> None:
    text = (DATA / "gvisor-prepared.txt").read_text()
    text = text.replace("/workspace rw,nosuid,noexec - tmpfs none rw,size=131072k", "/elsewhere rw")
    text = text.replace("size=65536k", "size=1g")
    text = text.replace(
        "Max processes             256                  256", "Max processes 256 4096"
    )
    text = text.replace("lo:", "eth0: 1 2 3\nlo:")
    unmet = unmet_requirements(_split(text), NEEDS)
    assert unmet == (
        "/workspace is not a mount of its own",
        "/dev/shm holds 1073741824 bytes, more than the profile's 67108864",
        "RLIMIT_NPROC is 4096, not the profile's 256",
        "network interfaces besides lo: eth0",
    )


def test_a_cut_output_proves_nothing_and_is_never_taken_for_prepared() -> None:
    text = (DATA / "gvisor-prepared.txt").read_text()
    for cut in (
        _split(text[: text.index("Max processes")]),  # net/dev never came
        _split(text[: text.index("Limit ")]),  # nor the limits
        split_probe_output(text, exited_cleanly=False),  # cat failed on a file, or no Status
        _split(""),
    ):
        assert not cut.complete
        assert unmet_requirements(cut, NEEDS) == ("the probe's output was cut short",)


def test_the_output_splits_where_each_file_begins() -> None:
    report = _report("gvisor-prepared.txt")
    assert report.release == "4.19.0-gvisor"
    assert report.version.startswith("Linux version 4.19.0-gvisor")
    assert all(line.split()[0].isdigit() for line in report.mounts)
    assert report.limits[0].startswith("Limit ")
    assert any(line.startswith("Max processes") for line in report.limits)
    assert report.interfaces[0].startswith("Inter-|")
    assert [line.split(":")[0].strip() for line in report.interfaces[2:]] == ["lo"]


def test_the_requirements_come_from_the_pod_the_operator_built() -> None:
    profile = parse_profile(
        "small",
        f"image: example/small:1@sha256:{'7' * 64}\n"
        "resources: {memory: 512Mi, scratch: 64Mi, processes: 100}\n",
    )
    pod = build_pod(make_sandbox(), profile, now=NOW)
    needs = requirements_of(pod, "gvisor")
    assert needs == NodeRequirements(
        mount_bytes={
            "/tmp": 64 << 20,
            "/workspace": 64 << 20,
            "/run/openblox": 16 << 20,
            "/dev/shm": 64 << 20,
        },
        processes=100,
        only_loopback=True,
    )
    # Kata keeps a network device inside its VM (default-deny policy closes it); a profile
    # that claims no boundary is owed nothing the probe checks.
    kata = requirements_of(pod, "kata")
    assert kata is not None and not kata.only_loopback
    assert requirements_of(pod, None) is None


def _a_pod_running_on_node_1(
    clock: Callable[[], datetime],
) -> tuple[FakeKube, Reconciler, Watched, SandboxCache, dict[str, Any]]:
    """The operator, after it made the Sandbox "demo" its pod, and the watch showed that
    pod Ready on node-1 (not probed yet)."""
    kube = FakeKube()
    reconciler, watched, cache = _operator(kube, clock=clock)
    _watch_everything(watched)
    kube.objects["/api/v1/nodes/node-1"] = {"status": {"nodeInfo": {"kernelVersion": "6.1"}}}
    sandbox = _cached(cache)
    reconciler.reconcile(sandbox, "sandbox")
    pod = kube.objects[f"/api/v1/namespaces/team-a/pods/{pod_name(sandbox)}"]
    running = {
        **pod,
        "spec": {**pod["spec"], "nodeName": "node-1"},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }
    watched.pod_seen(running)
    return kube, reconciler, watched, cache, running


def test_a_pod_on_an_unprepared_node_is_never_ready_goes_and_the_next_waits_and_avoids_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lacking = ("/tmp is mounted without noexec,nosuid",)
    probed: list[str] = []

    def probe(_kube: object, _ns: str, pod: str, _kernel: str, needs: Any) -> ProbeVerdict:
        assert needs is not None and needs.only_loopback  # the gVisor profile's needs
        probed.append(pod)
        return ProbeVerdict("gvisor", lacking)

    monkeypatch.setattr(pod_boundaries, "probe_boundary", probe)
    now = [NOW]
    kube, reconciler, watched, cache, running = _a_pod_running_on_node_1(lambda: now[0])
    sandbox = _cached(cache)
    path = f"/api/v1/namespaces/team-a/pods/{pod_name(sandbox)}"
    assert "affinity" not in running["spec"]
    kube.take()

    reconciler.reconcile(cache.get("team-a", "demo"), "pod")  # type: ignore[arg-type]
    assert probed == [pod_name(sandbox)]
    assert _ready(cache) == ("False", "NodeNotPrepared")
    calls = kube.take()
    assert ("DELETE", path) in calls
    event = next(
        body
        for target, body in kube.objects.items()
        if "/events/" in target and body.get("reason") == "NodeNotPrepared"
    )
    assert "node node-1" in event["message"] and lacking[0] in event["message"]

    # The pod is gone; within the hold no new one is made, and the reason stays.
    watched.pod_gone("team-a", running["metadata"]["name"], running["metadata"]["uid"])
    now[0] = NOW + timedelta(seconds=HOLD_SECONDS / 2)
    reconciler.reconcile(cache.get("team-a", "demo"), "pod")  # type: ignore[arg-type]
    assert not [call for call in kube.take() if call[0] == "POST" and "/pods" in call[1]]
    assert _ready(cache) == ("False", "NodeNotPrepared")

    # After it, the next pod prefers any node but node-1.
    now[0] = NOW + timedelta(seconds=HOLD_SECONDS + 1)
    reconciler.reconcile(cache.get("team-a", "demo"), "requeue")  # type: ignore[arg-type]
    replacement = kube.objects[path]
    terms = replacement["spec"]["affinity"]["nodeAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert terms[0]["preference"]["matchExpressions"] == [
        {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["node-1"]}
    ]


def test_a_pod_behind_another_boundary_is_a_mismatch_whatever_else_it_lacks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """runc gives a pod an eth0 as well: the graver finding, the boundary, is reported."""

    def probe(_kube: object, _ns: str, _pod: str, _kernel: str, _needs: Any) -> ProbeVerdict:
        return ProbeVerdict("none", ("network interfaces besides lo: eth0",))

    monkeypatch.setattr(pod_boundaries, "probe_boundary", probe)
    _kube, reconciler, _watched, cache, _running = _a_pod_running_on_node_1(lambda: NOW)
    reconciler.reconcile(cache.get("team-a", "demo"), "pod")  # type: ignore[arg-type]
    assert _ready(cache) == ("False", "BoundaryMismatch")


def test_an_emptydir_whose_size_the_runtime_does_not_show_passes_but_dev_shm_must_show_one() -> (
    None
):
    """The kind nodes' stock runsc mounts emptyDirs without a size= (bounded by the pod's
    memory limit there); /dev/shm's size is the NRI plugin's and is always shown."""
    text = (DATA / "gvisor-prepared.txt").read_text()
    text = text.replace("size=131072k,", "").replace("size=16384k,", "")
    assert unmet_requirements(_split(text), NEEDS) == ()
    assert unmet_requirements(_split(text.replace("size=65536k,", "")), NEEDS) == (
        "/dev/shm has no size bound",
    )


def test_several_avoided_nodes_make_one_valid_preference() -> None:
    """The API server takes one value with NotIn on matchFields; the hostname label takes
    a list (kind's three nodes showed the difference)."""
    pod = build_pod(
        make_sandbox(),
        parse_profile("p", IMAGE_LINE),
        now=NOW,
        avoid_nodes=frozenset({"worker2", "worker"}),
    )
    (term,) = pod["spec"]["affinity"]["nodeAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert term["preference"] == {
        "matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["worker", "worker2"]}
        ]
    }
