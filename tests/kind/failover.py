"""Arranging and breaking the kind cluster for the failover tests (and the kind bench):
where the operator's two replicas run, which node holds the Lease, and losing a node.

A node is lost with `docker pause` of its node container: its kubelet, its containers
and the operator replica on it freeze at once, as a partitioned machine does, and
`docker unpause` brings the same node (same address, same state) back afterwards, so
the cluster stays usable. A `docker kill` would do the same to the cluster, but the
node's restart is not what these tests are about.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests.cluster.kubectl import Kube
from tests.cluster.sandboxes import wait_for
from tests.cluster.test_operator_failover import SELECTOR, SYSTEM, _holder, _two_replicas_one_holder
from tests.kind.conftest import GVISOR_LABEL, docker

CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"


def nodes(kube: Kube) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(kube.kubectl("get", "nodes", "-o", "json").stdout)[
        "items"
    ]
    return items


def gvisor_worker(kube: Kube) -> str:
    """The worker with gVisor: the one node that can be lost with sandboxes on it (the
    control plane holds the API server; the other worker has no gVisor)."""
    found = [
        str(n["metadata"]["name"])
        for n in nodes(kube)
        if n["metadata"].get("labels", {}).get(GVISOR_LABEL) == "true"
        and CONTROL_PLANE_LABEL not in n["metadata"].get("labels", {})
    ]
    assert len(found) == 1, f"expected one gVisor worker, found {found}"
    return found[0]


def control_plane(kube: Kube) -> str:
    [name] = [
        str(n["metadata"]["name"])
        for n in nodes(kube)
        if CONTROL_PLANE_LABEL in n["metadata"].get("labels", {})
    ]
    return name


def crictl(node: str, *args: str, check: bool = True) -> str:
    """crictl inside a node container, its output stripped."""
    return docker("exec", node, "crictl", *args, check=check).stdout.strip()


def node_container(node: str, name: str, pod: str | None = None) -> str:
    """The id of the running container named `name` (of `pod`, if given) on a node."""
    labels = ["--label", f"io.kubernetes.pod.name={pod}"] if pod else []
    found = crictl(node, "ps", "-q", "--name", f"^{name}$", *labels).split()
    if not found:
        raise RuntimeError(f"no running container {name} on {node}")
    return found[0]


def sigkill_container(node: str, container: str) -> None:
    """SIGKILL a container's main process from inside its node: it releases nothing (no
    Lease handed back, no connection closed cleanly), as a crash would."""
    pid = crictl(node, "inspect", "-o", "go-template", "--template", "{{.info.pid}}", container)
    if not pid.isdigit():
        raise RuntimeError(f"no pid for container {container} on {node}: {pid!r}")
    docker("exec", node, "kill", "-KILL", pid)


def container_status(kube: Kube, namespace: str, pod: str, container: str) -> dict[str, Any]:
    """The pod's status of one container ({} before the kubelet reports it)."""
    body = kube.get("pod", pod, namespace)
    for status in (body.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == container:
            return dict(status)
    return {}


def replica_nodes(kube: Kube) -> dict[str, str]:
    """Operator pod -> node, for the replicas not being deleted."""
    pods = json.loads(
        kube.kubectl("get", "pods", "-n", SYSTEM, "-l", SELECTOR, "-o", "json").stdout
    )["items"]
    return {
        p["metadata"]["name"]: p["spec"].get("nodeName", "")
        for p in pods
        if not p["metadata"].get("deletionTimestamp")
    }


@contextmanager
def cordoned(kube: Kube, *names: str) -> Iterator[None]:
    for name in names:
        kube.kubectl("cordon", name)
    try:
        yield
    finally:
        for name in names:
            kube.kubectl("uncordon", name, check=False)


def leader_on(kube: Kube, target: str) -> tuple[str, str]:
    """(holder, standby) with the Lease holder on node `target` and the standby on
    another node, moving replicas there if needed: a replica is put on a node by
    deleting it while the other nodes are cordoned, and the Lease is moved by deleting
    its holder gracefully (a shutting-down holder releases it to the standby)."""
    others = [n["metadata"]["name"] for n in nodes(kube) if n["metadata"]["name"] != target]
    for _ in range(4):
        holder, standby = _two_replicas_one_holder(kube)
        where = replica_nodes(kube)
        if where[holder] == target and where[standby] != target:
            return holder, standby
        if where[standby] == target and where[holder] != target:
            kube.kubectl("delete", "pod", holder, "-n", SYSTEM, "--wait=false")

            # Arranging only: which replica takes over is the failover tests' claim. The
            # replica that replaces the deleted one may win, and the loop goes on from
            # there; a Lease that nobody else takes fails, naming its holder.
            def taken_from(gone: str = holder) -> str:
                now = _holder(kube)[0]
                return now if now and now != gone else ""

            try:
                wait_for(f"a replica other than {holder} to take the Lease", taken_from, 90, 0.5)
            except AssertionError as error:
                raise AssertionError(
                    f"{error}; holder now {_holder(kube)[1]!r}, replicas {replica_nodes(kube)}"
                ) from None
            continue
        # Neither replica on the target, or both: move the standby.
        away = others if where[holder] != target else [target]
        with cordoned(kube, *away):
            kube.kubectl("delete", "pod", standby, "-n", SYSTEM, "--wait=false")

            def moved_and_running(moved: str = standby) -> bool:
                # Scheduled before the nodes are uncordoned: a replacement still Pending
                # when they are may land on the very node it was to leave.
                where = replica_nodes(kube)
                return moved not in where and len(where) == 2 and all(where.values())

            wait_for("the moved replica to run", moved_and_running, 120, 1)
            _two_replicas_one_holder(kube)
    raise AssertionError(f"could not put the Lease holder on {target}: {replica_nodes(kube)}")


def node_ready(kube: Kube, name: str) -> bool:
    node = kube.get("node", name)
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (node.get("status") or {}).get("conditions") or []
    )


@contextmanager
def lost(kube: Kube, node: str) -> Iterator[float]:
    """Freeze the node container for the duration (yields the moment it froze), then
    thaw it and wait until the node is Ready again."""
    docker("pause", node)
    frozen = time.monotonic()
    try:
        yield frozen
    finally:
        docker("unpause", node, check=False)
        wait_for(f"node {node} Ready again", lambda: node_ready(kube, node), 180, 2)
