"""What a node can still schedule, summed the way the scheduler sums it.

Tests that need room for many pods check it first: the cluster is shared, so other
sessions' pods may hold it, and a test that then fails would blame openblox for a full
node. The shortfall names the resource and the pods holding the most of it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from openblox.models import Profile, parse_quantity
from tests.cluster.kube import Kube


@dataclass(frozen=True)
class PodNeed:
    """One pod's requests as the scheduler counts them: containers plus pod overhead."""

    cpu_millis: int
    memory_bytes: int


def _requests(pod: dict[str, Any]) -> PodNeed:
    spec = pod["spec"]
    cpu = memory = 0
    for container in spec["containers"]:
        each = container.get("resources", {}).get("requests", {})
        cpu += int(parse_quantity(str(each.get("cpu", "0"))) * 1000)
        memory += int(parse_quantity(str(each.get("memory", "0"))))
    overhead = spec.get("overhead") or {}
    cpu += int(parse_quantity(str(overhead.get("cpu", "0"))) * 1000)
    memory += int(parse_quantity(str(overhead.get("memory", "0"))))
    return PodNeed(cpu, memory)


def shortfall(kube: Kube, count: int, each: PodNeed) -> str | None:
    """None if some node has room for `count` more pods of `each`; else what is missing."""
    nodes = json.loads(kube.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    pods = json.loads(
        kube.kubectl(
            "get",
            "pods",
            "-A",
            "--field-selector=status.phase!=Succeeded,status.phase!=Failed",
            "-o",
            "json",
        ).stdout
    )["items"]
    problems = []
    for node in nodes:
        name = node["metadata"]["name"]
        allocatable = node["status"]["allocatable"]
        on_node = [p for p in pods if p["spec"].get("nodeName") == name]
        needs = [(p, _requests(p)) for p in on_node]
        free_cpu = int(parse_quantity(allocatable["cpu"]) * 1000) - sum(
            n.cpu_millis for _, n in needs
        )
        free_memory = int(parse_quantity(allocatable["memory"])) - sum(
            n.memory_bytes for _, n in needs
        )
        free_pods = int(allocatable["pods"]) - len(on_node)
        missing = []
        if free_cpu < count * each.cpu_millis:
            missing.append(f"CPU requests: {free_cpu}m free, {count * each.cpu_millis}m needed")
        if free_memory < count * each.memory_bytes:
            missing.append(
                f"memory requests: {free_memory // 2**20} MiB free, "
                f"{count * each.memory_bytes // 2**20} MiB needed"
            )
        if free_pods < count:
            missing.append(f"pods: {free_pods} free, {count} needed")
        if not missing:
            return None
        holders = sorted(needs, key=lambda pair: -pair[1].cpu_millis)[:5]
        held = ", ".join(
            f"{p['metadata']['namespace']}/{p['metadata']['name']} ({n.cpu_millis}m)"
            for p, n in holders
        )
        problems.append(f"node {name}: {'; '.join(missing)} (largest holders: {held})")
    return "; ".join(problems) or "the cluster has no nodes"


def pod_need(profile: Profile, runtime_class: dict[str, Any]) -> PodNeed:
    """What one pod of this profile takes from a node, its RuntimeClass overhead included."""
    overhead = (runtime_class.get("overhead") or {}).get("podFixed") or {}
    resources = profile.resources
    return PodNeed(
        resources.effective_cpu_request.value
        + int(parse_quantity(str(overhead.get("cpu", "0"))) * 1000),
        resources.memory.value + int(parse_quantity(str(overhead.get("memory", "0")))),
    )
