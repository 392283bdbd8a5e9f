"""The faults the chaos section injects into the kind cluster, and how each is known to
have healed. Every fault is one a real cluster meets: a process killed (SIGKILL, nothing
released), a control-plane part restarted, containerd restarted under running sandboxes,
a node frozen and thawed (`docker pause`: its kubelet, containers and network stop at
once, as a hung or partitioned machine's do).

Faults reach the nodes through the project's own dockerd (`docker exec` into a node
container, `crictl` there); nothing leaves this machine.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from bench import env

# The kind tests' helpers are how the project reaches kind's nodes; they import `embedded`
# from cluster/, which this puts on the path.
env.use_test_helpers()

from tests.cluster.kubectl import Kube  # noqa: E402
from tests.cluster.test_operator_failover import (  # noqa: E402
    SYSTEM,
    _holder,
    _running_replicas,
)
from tests.kind.conftest import docker  # noqa: E402
from tests.kind.failover import (  # noqa: E402
    container_status,
    control_plane,
    crictl,
    gvisor_worker,
    node_container,
    node_ready,
    replica_nodes,
    sigkill_container,
)

NODE_AGENT_NAMESPACE = "openblox-node"
NODE_AGENT_CONTAINER = "agent"
# Shorter than the controller manager's node-monitor-grace-period (50 s): the node comes
# back before it is called NotReady, so its pods live on and only what touched it waits.
FREEZE_SECONDS = 30.0
CHECK_SECONDS = 15.0
PAUSE_ATTEMPTS = 5


@dataclass(frozen=True)
class FaultKind:
    name: str
    title: str
    inject: Callable[[], Callable[[], bool]]
    """Breaks the part, and returns the check that says it answers again."""


def _restarts(kube: Kube, namespace: str, pod: str, container: str) -> int:
    return int(container_status(kube, namespace, pod, container).get("restartCount") or 0)


def _container_ready_again(
    kube: Kube, namespace: str, pod: str, container: str, before: int
) -> Callable[[], bool]:
    def check() -> bool:
        status = container_status(kube, namespace, pod, container)
        return int(status.get("restartCount") or 0) > before and bool(status.get("ready"))

    return check


def _lease_holder(kube: Kube) -> Callable[[], bool]:
    pod, identity = _holder(kube)
    if not pod:
        raise RuntimeError("nobody holds the operator's Lease")
    before = _restarts(kube, SYSTEM, pod, "operator")
    node = replica_nodes(kube)[pod]
    sigkill_container(node, node_container(node, "operator", pod))

    def check() -> bool:
        now_pod, now_identity = _holder(kube)
        replicas = _running_replicas(kube)
        return (
            bool(now_identity)
            and now_identity != identity
            and now_pod in replicas
            and _container_ready_again(kube, SYSTEM, pod, "operator", before)()
        )

    return check


def _standby(kube: Kube) -> Callable[[], bool]:
    holder, _ = _holder(kube)
    standbys = [r for r in _running_replicas(kube) if r != holder]
    if not standbys:
        raise RuntimeError(f"no standby replica beside {holder}")
    pod = standbys[0]
    before = _restarts(kube, SYSTEM, pod, "operator")
    node = replica_nodes(kube)[pod]
    sigkill_container(node, node_container(node, "operator", pod))
    return _container_ready_again(kube, SYSTEM, pod, "operator", before)


def _static(kube: Kube, component: str) -> Callable[[], bool]:
    """Stop a control-plane static pod's container; its kubelet starts it again."""
    plane = control_plane(kube)
    old = node_container(plane, component)
    crictl(plane, "stop", "--timeout", "0", old)

    def check() -> bool:
        found = crictl(plane, "ps", "-q", "--name", f"^{component}$", check=False).split()
        if not found or found[0] == old:
            return False
        ready = kube.kubectl("get", "--raw", "/readyz", check=False)
        return ready.returncode == 0 and ready.stdout.strip() == "ok"

    return check


def _containerd(kube: Kube) -> Callable[[], bool]:
    worker = gvisor_worker(kube)
    # Unchecked: a containerd that fails to start again is what the check then finds.
    docker("exec", worker, "systemctl", "restart", "containerd", check=False)

    def check() -> bool:
        answered = docker("exec", worker, "crictl", "info", check=False).returncode == 0
        return answered and node_ready(kube, worker)

    return check


def _pause(node: str) -> None:
    """`docker pause`, tried again a few times: the cgroup v1 freezer gives up ("unable to
    freeze") when a process in the node is busy in the kernel at that moment."""
    for _ in range(PAUSE_ATTEMPTS - 1):
        if docker("pause", node, check=False).returncode == 0:
            return
        time.sleep(2.0)
    refused = docker("pause", node, check=False)
    if refused.returncode != 0:
        raise RuntimeError(
            f"docker pause {node} failed {PAUSE_ATTEMPTS} times: {refused.stderr.strip()}"
        )


def _freeze(kube: Kube) -> Callable[[], bool]:
    worker = gvisor_worker(kube)
    _pause(worker)
    try:
        time.sleep(FREEZE_SECONDS)
    finally:
        docker("unpause", worker, check=False)
    return lambda: node_ready(kube, worker)


def _node_agent(kube: Kube) -> Callable[[], bool]:
    worker = gvisor_worker(kube)
    pods = json.loads(
        kube.kubectl(
            "get",
            "pods",
            "-n",
            NODE_AGENT_NAMESPACE,
            "--field-selector",
            f"spec.nodeName={worker}",
            "-o",
            "json",
        ).stdout
    )["items"]
    if not pods:
        raise RuntimeError(f"no node agent on {worker}")
    pod = pods[0]["metadata"]["name"]
    before = _restarts(kube, NODE_AGENT_NAMESPACE, pod, NODE_AGENT_CONTAINER)
    sigkill_container(worker, node_container(worker, NODE_AGENT_CONTAINER, pod))
    return _container_ready_again(kube, NODE_AGENT_NAMESPACE, pod, NODE_AGENT_CONTAINER, before)


def kinds(kube: Kube) -> list[FaultKind]:
    """Every fault, in the order a run injects them."""

    def bound(function: Callable[[Kube], Callable[[], bool]]) -> Callable[[], Callable[[], bool]]:
        return lambda: function(kube)

    return [
        FaultKind("lease-holder", "the Lease holder's process SIGKILLed", bound(_lease_holder)),
        FaultKind(
            "api-server",
            "kube-apiserver stopped (its kubelet starts it again)",
            bound(lambda k: _static(k, "kube-apiserver")),
        ),
        FaultKind("standby", "the standby replica's process SIGKILLed", bound(_standby)),
        FaultKind(
            "containerd",
            "containerd restarted on the gVisor worker, under its sandboxes",
            bound(_containerd),
        ),
        FaultKind(
            "etcd",
            "etcd stopped (its kubelet starts it again)",
            bound(lambda k: _static(k, "etcd")),
        ),
        FaultKind(
            "freeze",
            f"the gVisor worker frozen for {FREEZE_SECONDS:.0f} s (docker pause), then thawed",
            bound(_freeze),
        ),
        FaultKind("node-agent", "the gVisor worker's node agent SIGKILLed", bound(_node_agent)),
    ]


def _passes(check: Callable[[], bool], seconds: float) -> bool:
    """Whether `check` holds, asked on a thread of its own and given up on after `seconds`
    (a kubectl call against a restarting API server can hang for its whole timeout); a
    check that raises does not hold: the part is still down, so it cannot be reached."""
    answer: list[bool] = []

    def ask() -> None:
        try:
            answer.append(bool(check()))
        except Exception:
            answer.append(False)

    thread = threading.Thread(target=ask, name="fault check", daemon=True)
    thread.start()
    thread.join(seconds)
    return bool(answer and answer[0])


def wait_healthy(check: Callable[[], bool], seconds: float) -> float | None:
    """Seconds until `check` holds, or None if it did not within `seconds`."""
    started = time.monotonic()
    while (left := seconds - (time.monotonic() - started)) > 0:
        if _passes(check, min(CHECK_SECONDS, left)):
            return time.monotonic() - started
        time.sleep(1.0)
    return None
