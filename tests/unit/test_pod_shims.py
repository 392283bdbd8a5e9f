"""Finding a pod's gVisor shims in a process table (tests/cluster/pod_shims.py), on the
argv shapes the embedded node's `ps` shows. On the node it runs in test_density.py and the
kind 42 test."""

from __future__ import annotations

import pytest

from tests.cluster.pod_shims import gofer_bundle, parse_ps, runsc_waits, shims_of

BUNDLES = "/run/openblox/containerd/io.containerd.runtime.v2.task/k8s.io"
SHIM = "/var/cache/openblox/gvisor-v0/containerd-shim-runsc-v1 -namespace k8s.io -id"


def _gofer(pid: int, ppid: int, cid: str) -> str:
    return (
        f"{pid} {ppid} runsc-gofer --root=/run/openblox/runsc/k8s.io "
        f"--log={BUNDLES}/{cid}/log.json --network=none --log-fd=3 gofer "
        f"--bundle {BUNDLES}/{cid} --gofer-mount-confs=lisafs:none --spec-fd=4 {cid}"
    )


GROUPED = "\n".join(
    [
        f"10 1 {SHIM} pause",
        _gofer(11, 10, "pause"),
        "12 10 runsc-sandbox --network=none --root=/run/openblox/runsc/k8s.io boot pause",
        _gofer(13, 10, "app"),
    ]
)


def test_each_container_is_served_by_the_parent_of_its_gofer() -> None:
    served = shims_of(parse_ps(GROUPED), ["pause", "app"])
    assert {cid: shim.pid for cid, shim in served.items()} == {"pause": 10, "app": 10}


def test_a_shim_per_container_shows_as_two_shims() -> None:
    table = "\n".join(
        [f"10 1 {SHIM} pause", _gofer(11, 10, "pause"), f"20 1 {SHIM} app", _gofer(21, 20, "app")]
    )
    served = shims_of(parse_ps(table), ["pause", "app"])
    assert {shim.pid for shim in served.values()} == {10, 20}


def test_a_container_without_a_gofer_under_a_shim_is_named() -> None:
    orphan = "\n".join([f"10 1 {SHIM} pause", _gofer(11, 10, "pause"), _gofer(13, 1, "app")])
    with pytest.raises(AssertionError, match=r"containers \['app'\]"):
        shims_of(parse_ps(orphan), ["pause", "app"])


def test_the_bundle_is_read_only_from_a_gofer_command_line() -> None:
    assert gofer_bundle(["runsc-gofer", "gofer", "--bundle=/b/x"]) == "/b/x"
    assert gofer_bundle(["runsc-sandbox", "--bundle", "/b/x", "boot"]) is None
    assert gofer_bundle(["sh", "-c", "gofer --bundle /b/x"]) is None


def test_a_runsc_wait_for_a_pod_container_is_found() -> None:
    wait = "30 10 /var/lib/openblox/bin/runsc --root=/run/openblox/runsc/k8s.io wait app"
    table = parse_ps(GROUPED + "\n" + wait)
    assert [p.pid for p in runsc_waits(table, ["pause", "app"])] == [30]
    assert runsc_waits(parse_ps(GROUPED), ["pause", "app"]) == []
