"""Finding a pod's gVisor shims in a process table (tests/cluster/pod_shims.py), on the
argv shapes the embedded node's `ps` shows. On the node it runs in test_density.py and the
kind 42 test."""

from __future__ import annotations

import pytest

from tests.cluster.pod_shims import (
    gofers_of,
    parse_ps,
    runsc_bundle,
    runsc_waits,
    shims_of,
    shims_started_for,
)

BUNDLES = "/run/openblox/containerd/io.containerd.runtime.v2.task/k8s.io"
SHIM = "/var/cache/openblox/gvisor-v0/containerd-shim-runsc-v1 -namespace k8s.io -id"


def _sandbox(pid: int, ppid: int, cid: str) -> str:
    return (
        f"{pid} {ppid} runsc-sandbox --network=none --root=/run/openblox/runsc/k8s.io boot "
        f"--bundle={BUNDLES}/{cid} --gofer-mount-confs=erofs:none --io-fds=5 {cid}"
    )


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
        _sandbox(12, 10, "pause"),
        _gofer(13, 10, "app"),
    ]
)
# The pause container served from the node's EROFS image: no gofer of its own.
GOFERLESS_PAUSE = "\n".join(
    [f"10 1 {SHIM} pause", _sandbox(12, 10, "pause"), _gofer(13, 10, "app")]
)


def test_each_container_is_served_by_the_parent_of_its_gofer() -> None:
    served = shims_of(parse_ps(GROUPED), ["pause", "app"])
    assert {cid: shim.pid for cid, shim in served.items()} == {"pause": 10, "app": 10}


def test_a_pause_container_without_a_gofer_is_served_by_the_parent_of_its_sandbox() -> None:
    served = shims_of(parse_ps(GOFERLESS_PAUSE), ["pause", "app"])
    assert {cid: shim.pid for cid, shim in served.items()} == {"pause": 10, "app": 10}
    assert set(gofers_of(parse_ps(GOFERLESS_PAUSE), ["pause", "app"])) == {"app"}
    assert set(gofers_of(parse_ps(GROUPED), ["pause", "app"])) == {"pause", "app"}


def test_two_gofers_for_one_container_are_named() -> None:
    table = parse_ps(GOFERLESS_PAUSE + "\n" + _gofer(14, 10, "app"))
    with pytest.raises(AssertionError, match="two gofers for container app"):
        gofers_of(table, ["pause", "app"])


def test_a_shim_per_container_shows_as_two_shims() -> None:
    table = "\n".join(
        [f"10 1 {SHIM} pause", _gofer(11, 10, "pause"), f"20 1 {SHIM} app", _gofer(21, 20, "app")]
    )
    served = shims_of(parse_ps(table), ["pause", "app"])
    assert {shim.pid for shim in served.values()} == {10, 20}


def test_a_container_without_a_gofer_under_a_shim_is_named() -> None:
    orphan = "\n".join([f"10 1 {SHIM} pause", _gofer(11, 10, "pause"), _gofer(13, 1, "app")])
    with pytest.raises(AssertionError, match=r"process under a .* for containers \['app'\]"):
        shims_of(parse_ps(orphan), ["pause", "app"])


def test_the_bundle_is_read_only_from_the_named_runsc_command_line() -> None:
    assert runsc_bundle(["runsc-gofer", "gofer", "--bundle=/b/x"], "gofer") == "/b/x"
    assert runsc_bundle(["runsc-sandbox", "boot", "--bundle", "/b/x"], "boot") == "/b/x"
    assert runsc_bundle(["runsc-sandbox", "--bundle", "/b/x", "boot"], "gofer") is None
    assert runsc_bundle(["runsc-sandbox", "--bundle", "/b/x", "boot"], "boot") is None
    assert runsc_bundle(["sh", "-c", "gofer --bundle /b/x"], "gofer") is None


def test_a_runsc_wait_for_a_pod_container_is_found() -> None:
    wait = "30 10 /var/lib/openblox/bin/runsc --root=/run/openblox/runsc/k8s.io wait app"
    table = parse_ps(GROUPED + "\n" + wait)
    assert [p.pid for p in runsc_waits(table, ["pause", "app"])] == [30]
    assert runsc_waits(parse_ps(GROUPED), ["pause", "app"]) == []


# Both containers served from the node's EROFS images: only the pod sandbox's process.
GOFERLESS = "\n".join([f"10 1 {SHIM} pause", _sandbox(12, 10, "pause"), f"30 1 {SHIM} other"])


def test_a_goferless_pod_shows_one_shim_started_for_its_sandbox_and_none_for_its_container() -> (
    None
):
    table = parse_ps(GOFERLESS)
    pod_shim = shims_of(table, ["pause"])["pause"]
    assert [p.pid for p in shims_started_for(table, ["pause", "app"])] == [pod_shim.pid] == [10]
    assert gofers_of(table, ["pause", "app"]) == {}
    ungrouped = parse_ps(GOFERLESS + f"\n20 1 {SHIM} app")
    assert [p.pid for p in shims_started_for(ungrouped, ["pause", "app"])] == [10, 20]
