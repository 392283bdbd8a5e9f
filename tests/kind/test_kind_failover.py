"""The operator across nodes: two replicas on different kind nodes, the Lease holder's
pod killed, and the Lease holder's node lost with a sandbox on it.

Bounds, from the parts' own settings, not from a measured run:

- the Lease changes hands within `LeaseTiming().takeover_bound_seconds` of the holder's
  death (15 s Lease, renewed every 2 s), and the loop acts within a pass more;
- a lost node's pods are marked not ready after the controller manager's
  node-monitor-grace-period (Kubernetes' default, 50 s; kind sets none), evicted
  NODE_LOSS_TOLERATION_SECONDS (10 s) later, and released by the operator
  LOST_NODE_GRACE_SECONDS (15 s) after that.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from openblox.builders.pod import NODE_LOSS_TOLERATION_SECONDS
from openblox.builders.pod_state import LOST_NODE_GRACE_SECONDS
from tests.cluster.capacity import require_room, sandbox_node_selector, sandbox_requests
from tests.cluster.kubectl import Kube
from tests.cluster.sandboxes import (
    get_sandbox,
    opted_in_namespace,
    ready_condition,
    sandbox,
    sandbox_pods,
    wait_for,
    wait_reason,
)
from tests.cluster.test_operator_failover import (
    HANDOVER_SECONDS,
    POLL_SLACK_SECONDS,
    SYSTEM,
    _holder,
    _two_replicas_one_holder,
)
from tests.kind.conftest import docker
from tests.kind.failover import (
    control_plane,
    cordoned,
    gvisor_worker,
    leader_on,
    lost,
    node_container,
    nodes,
    replica_nodes,
    sigkill_container,
)
from tests.kind.test_kind_cluster import _openblox

pytestmark = pytest.mark.kind

NODE_MONITOR_GRACE_SECONDS = 50
# A pod's start on a loaded 2-core host (image present, gVisor sandbox, boundary probe).
POD_START_SECONDS = 90


def _room_on(kube: Kube, node: str, count: int = 1) -> None:
    require_room(
        kube,
        sandbox_requests(kube, "code-exec"),
        count,
        f"{count} code-exec Sandbox(es) on {node}",
        node_selector={**sandbox_node_selector(kube, "code-exec"), "kubernetes.io/hostname": node},
    )


def _ready_on(kube: Kube, name: str, namespace: str, node: str, *others: str) -> dict[str, Any]:
    """Create a Sandbox whose pod can only go to `node` (the others cordoned meanwhile)."""
    with cordoned(kube, *others):
        kube.apply(sandbox(name, namespace))
        body = wait_reason(kube, name, namespace, "Ready", timeout=POD_START_SECONDS + 60)
    [pod] = [
        p
        for p in sandbox_pods(kube, namespace)
        if p["metadata"]["name"] == body["status"]["podName"]
    ]
    assert pod["spec"]["nodeName"] == node
    return pod


def _live_pods_of(kube: Kube, namespace: str, name: str) -> list[dict[str, Any]]:
    return [
        p
        for p in sandbox_pods(kube, namespace)
        if p["metadata"]["labels"].get("openblox.sh/sandbox") == name
        and not p["metadata"].get("deletionTimestamp")
    ]


def test_the_two_replicas_run_on_different_nodes(kind_operator: Kube) -> None:
    holder, standby = _two_replicas_one_holder(kind_operator)
    where = replica_nodes(kind_operator)

    assert where[holder] != where[standby], where


def test_killing_the_lease_holder_hands_over_to_the_replica_on_another_node(
    kind_operator: Kube,
) -> None:
    kube = kind_operator
    _room_on(kube, control_plane(kube))
    holder, standby = _two_replicas_one_holder(kube)
    where = replica_nodes(kube)
    _, old_identity = _holder(kube)
    with opted_in_namespace(kube, "kind-failover") as namespace:
        killed = time.monotonic()
        sigkill_container(where[holder], node_container(where[holder], "operator", holder))
        kube.apply(sandbox("after-kill", namespace))

        def new_holder() -> str | None:
            pod, identity = _holder(kube)
            return pod if identity and identity != old_identity else None

        taken_by = wait_for("a new Lease holder", new_holder, HANDOVER_SECONDS + 30, 0.5)
        handover = time.monotonic() - killed
        assert handover <= HANDOVER_SECONDS + POLL_SLACK_SECONDS, (
            f"the Lease changed hands {handover:.1f}s after the kill"
        )
        # The killed container restarts in place; either process may win the free Lease.
        assert taken_by in (holder, standby)

        wait_reason(kube, "after-kill", namespace, "Ready", HANDOVER_SECONDS + POD_START_SECONDS)
        assert len(_live_pods_of(kube, namespace, "after-kill")) == 1
    _two_replicas_one_holder(kube)


def test_losing_the_lease_holders_node_hands_over_and_replaces_its_sandbox(
    kind_operator: Kube,
) -> None:
    kube = kind_operator
    worker, plane = gvisor_worker(kube), control_plane(kube)
    plain = [n["metadata"]["name"] for n in nodes(kube)]
    plain = [n for n in plain if n not in (worker, plane)]
    _room_on(kube, worker)
    _room_on(kube, plane, 3)
    _, standby = leader_on(kube, worker)
    _, old_identity = _holder(kube)
    with opted_in_namespace(kube, "kind-nodeloss") as namespace:
        lost_pod = _ready_on(kube, "on-lost-node", namespace, worker, plane, *plain)
        _ready_on(kube, "survivor", namespace, plane, worker, *plain)
        reasons = ["Ready"]

        with lost(kube, worker) as frozen:

            def new_holder() -> str | None:
                pod, identity = _holder(kube)
                return pod if identity and identity != old_identity else None

            taken_by = wait_for("the standby to take the Lease", new_holder, HANDOVER_SECONDS + 30)
            assert time.monotonic() - frozen <= HANDOVER_SECONDS + POLL_SLACK_SECONDS
            assert taken_by == standby

            # The new holder reconciles: a new Sandbox gets a pod, and the survivor keeps
            # running commands. The Sandbox on the frozen node is watched from here on.
            kube.apply(sandbox("after-loss", namespace))
            run = _openblox(
                kube, namespace, "exec", "survivor", "--", "python3", "-c", "print(6*7)"
            )
            assert run.returncode == 0 and run.stdout.strip() == "42", run.stderr

            def reported() -> dict[str, Any] | None:
                body = get_sandbox(kube, "on-lost-node", namespace) or {}
                reason = ready_condition(body).get("reason")
                if reason and reasons[-1] != reason:
                    reasons.append(reason)
                return body if reason == "NodeLost" else None

            noticed = wait_for(
                "the Sandbox on the lost node to say so",
                reported,
                NODE_MONITOR_GRACE_SECONDS + NODE_LOSS_TOLERATION_SECONDS + 30,
                1,
            )
            assert f"node {worker} stopped answering" in ready_condition(noticed)["message"]

            def replaced() -> dict[str, Any] | None:
                body = reported() or get_sandbox(kube, "on-lost-node", namespace) or {}
                reason = ready_condition(body).get("reason")
                if reason and reasons[-1] != reason:
                    reasons.append(reason)
                live = _live_pods_of(kube, namespace, "on-lost-node")
                assert len(live) <= 1, f"two pods for one Sandbox: {live}"
                if (
                    reason == "Ready"
                    and live
                    and live[0]["metadata"]["uid"] != lost_pod["metadata"]["uid"]
                ):
                    return live[0]
                return None

            new_pod = wait_for(
                "the Sandbox on the lost node to get a new pod",
                replaced,
                NODE_LOSS_TOLERATION_SECONDS + LOST_NODE_GRACE_SECONDS + POD_START_SECONDS + 30,
                1,
            )
            assert new_pod["spec"]["nodeName"] == plane
            events = kube.events(namespace, "on-lost-node")
            assert any(f"node {worker} was lost" in e.get("message", "") for e in events), events
            # Never a silent Pending: between Ready and Ready again it said NodeLost.
            assert "NodeLost" in reasons and reasons[-1] == "Ready", reasons
            assert "PodPending" not in reasons[: reasons.index("NodeLost")], reasons
            run = _openblox(kube, namespace, "exec", "survivor", "--", "true")
            assert run.returncode == 0, run.stderr
            # The scheduler may have placed the new Sandbox on the frozen node too (it was
            # not NotReady yet); then it was evicted and replaced the same way.
            wait_reason(
                kube,
                "after-loss",
                namespace,
                "Ready",
                NODE_MONITOR_GRACE_SECONDS
                + NODE_LOSS_TOLERATION_SECONDS
                + LOST_NODE_GRACE_SECONDS
                + POD_START_SECONDS,
            )

        # The node is back: its kubelet finishes the evicted pod, and both replicas run.
        wait_for(
            "the old pod gone from the thawed node",
            lambda: all(
                p["metadata"]["uid"] != lost_pod["metadata"]["uid"]
                for p in sandbox_pods(kube, namespace)
            ),
            120,
            2,
        )
    kube.kubectl(
        "rollout", "status", "deployment/openblox-operator", "-n", SYSTEM, "--timeout=300s"
    )
    _two_replicas_one_holder(kube)


def _containerd_answers(node: str) -> bool:
    active = docker("exec", node, "systemctl", "is-active", "containerd", check=False)
    info = docker("exec", node, "crictl", "info", check=False)
    return active.stdout.strip() == "active" and info.returncode == 0


def test_containerd_restarted_under_a_running_sandbox_comes_back_and_the_sandbox_keeps_its_files(
    kind_operator: Kube,
) -> None:
    """containerd restarts (an upgrade, a crash) while sandboxes run: its shims outlive it,
    so a sandbox keeps its processes and /workspace, and the node takes new pods again.
    The chaos bench found the node's containerd never came back here: a step run before
    each start failed once the mounts it removes were already gone."""
    kube = kind_operator
    worker, plane = gvisor_worker(kube), control_plane(kube)
    plain = [
        n["metadata"]["name"] for n in nodes(kube) if n["metadata"]["name"] not in (worker, plane)
    ]
    _room_on(kube, worker, 2)
    with opted_in_namespace(kube, "kind-containerd") as namespace:
        pod = _ready_on(kube, "through-restart", namespace, worker, plane, *plain)
        wrote = _openblox(
            kube, namespace, "exec", "through-restart", "--", "python3", "-c",
            "open('/workspace/kept', 'w').write('kept')",
        )  # fmt: skip
        assert wrote.returncode == 0, wrote.stderr

        restart = docker("exec", worker, "systemctl", "restart", "containerd", check=False)
        try:
            wait_for(
                f"containerd on {worker} to answer again",
                lambda: _containerd_answers(worker),
                60,
                1,
            )
        except AssertionError as error:
            journal = docker(
                "exec", worker, "journalctl", "-u", "containerd", "--no-pager", "-n", "15",
                check=False,
            ).stdout  # fmt: skip
            raise AssertionError(
                f"{error}; `systemctl restart` exited {restart.returncode} "
                f"({restart.stderr.strip()}); containerd's journal ends:\n{journal}"
            ) from None

        read = _openblox(
            kube, namespace, "exec", "through-restart", "--", "python3", "-c",
            "print(open('/workspace/kept').read())",
        )  # fmt: skip
        assert read.returncode == 0 and read.stdout.strip() == "kept", (read.stdout, read.stderr)
        [live] = _live_pods_of(kube, namespace, "through-restart")
        assert live["metadata"]["uid"] == pod["metadata"]["uid"], "the pod was replaced"
        # The node takes new pods again: a second Sandbox starts there.
        _ready_on(kube, "after-restart", namespace, worker, plane, *plain)
