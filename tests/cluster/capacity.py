"""Room on the nodes, checked before a test that needs it, so a full node is reported as
what is missing instead of a sandbox that times out Pending.

Room is what the scheduler counts: a node's allocatable minus the requests of every pod
bound to it that has not ended (one shutting down still holds its share), each pod's
requests being its containers' sum or its largest init container, whichever is more,
plus its RuntimeClass overhead. What a sandbox needs is read from the pod the operator
would build: the profile from the live ConfigMap through ``build_pod``, and the overhead
from the live RuntimeClass. Nothing here is a constant that a profile edit could outdate.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from openblox.builders.pod import build_pod
from openblox.models import parse_profile, parse_quantity
from openblox.models.sandbox import parse_sandbox
from tests.cluster.kubectl import Kube

_MI = 1 << 20


@dataclass(frozen=True)
class Requests:
    cpu_millis: int = 0
    memory_bytes: int = 0

    def __add__(self, other: Requests) -> Requests:
        return Requests(self.cpu_millis + other.cpu_millis, self.memory_bytes + other.memory_bytes)

    def __sub__(self, other: Requests) -> Requests:
        return Requests(self.cpu_millis - other.cpu_millis, self.memory_bytes - other.memory_bytes)

    def times(self, count: int) -> Requests:
        return Requests(self.cpu_millis * count, self.memory_bytes * count)

    def fits_in(self, room: Requests) -> bool:
        return self.cpu_millis <= room.cpu_millis and self.memory_bytes <= room.memory_bytes

    def __str__(self) -> str:
        return f"{self.cpu_millis}m CPU, {self.memory_bytes / _MI:.0f}Mi memory"


def _resource_list(values: Mapping[str, Any] | None) -> Requests:
    values = values or {}
    cpu = values.get("cpu")
    memory = values.get("memory")
    return Requests(
        int(parse_quantity(str(cpu)) * 1000) if cpu is not None else 0,
        int(parse_quantity(str(memory))) if memory is not None else 0,
    )


def pod_requests(pod: Mapping[str, Any]) -> Requests:
    """What the scheduler charges a node for this pod (its effective requests).

    Where the kubelet wrote the pod-level status of Kubernetes 1.36+ (the gate
    InPlacePodLevelResourcesVerticalScaling on), the scheduler takes the larger of that
    status and the spec, and adds the overhead again although the status holds it
    (kubernetes/kubernetes#139627): counted here the same way, so room is never promised
    that the scheduler does not see."""
    spec = pod.get("spec") or {}
    total = Requests()
    for container in spec.get("containers") or []:
        total += _resource_list((container.get("resources") or {}).get("requests"))
    for container in spec.get("initContainers") or []:
        init = _resource_list((container.get("resources") or {}).get("requests"))
        total = Requests(
            max(total.cpu_millis, init.cpu_millis), max(total.memory_bytes, init.memory_bytes)
        )
    status = pod.get("status") or {}
    allocated = status.get("allocatedResources")
    actuated = (status.get("resources") or {}).get("requests")
    if allocated and actuated:
        for held in (_resource_list(allocated), _resource_list(actuated)):
            total = Requests(
                max(total.cpu_millis, held.cpu_millis),
                max(total.memory_bytes, held.memory_bytes),
            )
    return total + _resource_list(spec.get("overhead"))


def _placeholder_sandbox(namespace: str, name: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": "00000000-0000-0000-0000-000000000000",
            "generation": 1,
            "creationTimestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
        "spec": {"profile": "placeholder"},
    }


def sandbox_requests(kube: Kube, profile_name: str) -> Requests:
    """What one Sandbox of this profile asks of a node: the operator's pod for it, as
    ``build_pod`` makes it from the live profile, plus its RuntimeClass's overhead."""
    data = kube.get("configmap", "openblox-profiles", "openblox-system").get("data") or {}
    if profile_name not in data:
        raise AssertionError(f"profile {profile_name} is not in openblox-profiles")
    profile = parse_profile(profile_name, data[profile_name])
    placeholder = parse_sandbox(_placeholder_sandbox("room", "room"))
    pod = build_pod(placeholder, profile, now=placeholder.creation_timestamp)
    runtime_class = kube.get("runtimeclass", profile.runtime_class_name)
    pod["spec"]["overhead"] = (runtime_class.get("overhead") or {}).get("podFixed") or {}
    return pod_requests(pod)


def sandbox_node_selector(kube: Kube, profile_name: str) -> dict[str, str]:
    """The nodes a Sandbox of this profile may run on: its RuntimeClass's
    ``scheduling.nodeSelector``, which admission copies into the pod (on kind, only the
    nodes labelled ``openblox.sh/gvisor=true`` have gVisor)."""
    data = kube.get("configmap", "openblox-profiles", "openblox-system").get("data") or {}
    if profile_name not in data:
        raise AssertionError(f"profile {profile_name} is not in openblox-profiles")
    profile = parse_profile(profile_name, data[profile_name])
    runtime_class = kube.get("runtimeclass", profile.runtime_class_name)
    return dict(((runtime_class.get("scheduling") or {}).get("nodeSelector")) or {})


@dataclass(frozen=True)
class NodeRoom:
    node: str
    allocatable: Requests
    requested: Requests
    holders: tuple[tuple[str, Requests], ...]
    """The pods holding the requests, largest first ("namespace/name")."""
    pods_free: int = 1 << 30
    """Pods the node may still run (its allocatable ``pods`` less the pods bound to it)."""

    @property
    def free(self) -> Requests:
        return self.allocatable - self.requested

    def how_many(self, each: Requests) -> int:
        free = self.free
        counts = []
        if each.cpu_millis:
            counts.append(max(0, free.cpu_millis) // each.cpu_millis)
        if each.memory_bytes:
            counts.append(max(0, free.memory_bytes) // each.memory_bytes)
        return min([*counts, max(0, self.pods_free)])

    def describe(self) -> str:
        holders = ", ".join(f"{name} {held}" for name, held in self.holders[:12])
        more = len(self.holders) - 12
        return (
            f"node {self.node}: allocatable {self.allocatable}, requested {self.requested}, "
            f"free {self.free}, room for {self.pods_free} more pods; "
            f"held by {holders}{f' and {more} more' if more > 0 else ''}"
        )


def _schedulable(node: Mapping[str, Any]) -> bool:
    if (node.get("spec") or {}).get("unschedulable"):
        return False
    taints = (node.get("spec") or {}).get("taints") or []
    return not any(t.get("effect") in ("NoSchedule", "NoExecute") for t in taints)


def _selected(node: Mapping[str, Any], node_selector: Mapping[str, str] | None) -> bool:
    labels = (node.get("metadata") or {}).get("labels") or {}
    return all(labels.get(key) == value for key, value in (node_selector or {}).items())


def node_rooms(kube: Kube, node_selector: Mapping[str, str] | None = None) -> list[NodeRoom]:
    """Every schedulable node's room, as the scheduler would count it now; with a node
    selector, only the nodes it selects."""
    nodes = json.loads(kube.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    pods = json.loads(
        kube.kubectl(
            "get",
            "pods",
            "-A",
            "--field-selector",
            "status.phase!=Succeeded,status.phase!=Failed",
            "-o",
            "json",
        ).stdout
    )["items"]
    rooms = []
    for node in nodes:
        name = node["metadata"]["name"]
        if not _schedulable(node) or not _selected(node, node_selector):
            continue
        on_node = [p for p in pods if (p.get("spec") or {}).get("nodeName") == name]
        holders = sorted(
            (
                (f"{p['metadata']['namespace']}/{p['metadata']['name']}", pod_requests(p))
                for p in on_node
            ),
            key=lambda item: (-item[1].cpu_millis, -item[1].memory_bytes),
        )
        requested = sum((held for _, held in holders), Requests())
        allocatable = _resource_list((node.get("status") or {}).get("allocatable"))
        pods_allowed = (node.get("status") or {}).get("allocatable", {}).get("pods")
        pods_free = int(pods_allowed) - len(on_node) if pods_allowed is not None else 1 << 30
        rooms.append(NodeRoom(name, allocatable, requested, tuple(holders), pods_free))
    return rooms


def _fit(rooms: Iterable[NodeRoom], each: Requests, *, one_node: bool = False) -> int:
    counts = [room.how_many(each) for room in rooms]
    if one_node:
        return max(counts, default=0)
    return sum(counts)


def require_room(
    kube: Kube,
    each: Requests,
    count: int,
    what: str,
    *,
    patience: float = 120.0,
    one_node: bool = False,
    node_selector: Mapping[str, str] | None = None,
) -> None:
    """Fail the test, saying what is short and who holds it, unless ``count`` pods of
    ``each`` fit on the nodes ``node_selector`` selects (with ``one_node``, all on one
    node). Waits up to ``patience`` seconds first: the pods of an earlier test, still
    shutting down, hold their requests until they are gone."""
    deadline = time.monotonic() + patience
    while True:
        rooms = node_rooms(kube, node_selector)
        fitting = _fit(rooms, each, one_node=one_node)
        if fitting >= count:
            return
        if time.monotonic() > deadline:
            break
        time.sleep(2)
    short = each.times(count - fitting)
    where = f" on nodes labelled {dict(node_selector)}" if node_selector else ""
    raise AssertionError(
        f"not enough room for {what}{where}: it needs {count} x ({each}) = "
        f"{each.times(count)}, only {fitting} fit; short by about {short}. "
        + (" | ".join(room.describe() for room in rooms) or "no such node is schedulable")
    )


def require_sandbox_room(
    kube: Kube, profile_name: str, count: int = 1, *, one_node: bool = False
) -> Requests:
    """``require_room`` for ``count`` Sandboxes of a profile; returns what one needs."""
    each = sandbox_requests(kube, profile_name)
    what = f"{count} Sandbox(es) of profile {profile_name}"
    require_room(
        kube,
        each,
        count,
        what + (" on one node" if one_node else ""),
        one_node=one_node,
        node_selector=sandbox_node_selector(kube, profile_name),
    )
    return each
