"""Where the node's CPU goes while something happens: each daemon of the embedded
cluster, each operator replica, the benchmark's own process (the client) and the rest of
the node, read from /proc before and after. A burst of claims on two cores is bound by
the CPU its path needs, not by waiting: this shows how much, and whose."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from bench import procs
from bench.cluster_side import Kube, Operator
from bench.results import Section

# The embedded cluster's daemons, by the pid files cluster/cluster.sh keeps.
CLUSTER_RUN = Path("/var/lib/openblox/cluster/run")
DAEMONS = (
    "kube-apiserver",
    "etcd",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "containerd",
    "kube-proxy",
    "kube-router",
)
LEADER = "operator (Lease holder)"
STANDBY = "operator (standby)"
CLIENT = "benchmark client (this process)"
REST = "rest of the node (kernel, shims, sandboxes, other work)"
NODE = "node"
# What one claim cannot be answered without: its create and its two writes (API server,
# etcd), the hand-out (the Lease holder) and the caller's request and watch (the client).
CLAIM_PATH = ("kube-apiserver", "etcd", LEADER, CLIENT)


def roles(kube: Kube) -> dict[str, list[int]]:
    """Processes by role; empty where this is not the embedded cluster's node."""
    found: dict[str, list[int]] = {}
    for name in DAEMONS:
        try:
            found[name] = [int((CLUSTER_RUN / f"{name}.pid").read_text())]
        except (OSError, ValueError):
            continue
    if "kube-apiserver" not in found:
        return {}
    operator = Operator(kube)
    leader = operator.pod()["metadata"]["uid"]
    for pod in operator.replicas():
        role = LEADER if pod["metadata"]["uid"] == leader else STANDBY
        try:
            found.setdefault(role, []).extend(operator.pids(pod))
        except RuntimeError:
            continue  # a replica starting or going: its CPU is in the rest of the node
    found[CLIENT] = [os.getpid()]
    return found


def node_busy_seconds(stat: str | None = None) -> float:
    """CPU time the whole node has spent busy since boot (/proc/stat's first line)."""
    text = stat if stat is not None else Path("/proc/stat").read_text()
    fields = [int(x) for x in text.splitlines()[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / procs.CLOCK_TICKS


def snapshot(by_role: Mapping[str, Iterable[int]]) -> dict[str, float]:
    taken = {role: procs.cpu_seconds(pids) for role, pids in by_role.items()}
    taken[NODE] = node_busy_seconds()
    return taken


def per_claim_ms(
    before: Mapping[str, float], after: Mapping[str, float], claims: int
) -> dict[str, float]:
    """CPU milliseconds per claim by role, largest first; what no role accounts for is
    the rest of the node. A process that ended in between counts nothing here: what it
    spent is in the rest of the node, which the node's own total still holds."""
    if claims <= 0:
        raise ValueError("per-claim CPU needs at least one claim")
    spent = {
        role: max(after.get(role, 0.0) - before.get(role, 0.0), 0.0)
        for role in before
        if role != NODE
    }
    rest = max(after[NODE] - before[NODE] - sum(spent.values()), 0.0)
    spent[REST] = rest
    ordered = sorted(spent.items(), key=lambda item: (-item[1], item[0]))
    return {role: seconds * 1000 / claims for role, seconds in ordered}


def median_floor_ms(per_claim: Mapping[str, float], claims: int, cores: int) -> float:
    """The earliest the median claim of a burst can be answered, from the CPU its path
    costs: half the claims need that much CPU each before half of them are answered, and
    `cores` CPUs can give it no faster, whatever the order they are served in."""
    path_ms = sum(per_claim.get(role, 0.0) for role in CLAIM_PATH)
    return math.ceil(claims / 2) * path_ms / cores


def record_burst(section: Section, burst: int, per_claim: dict[str, float]) -> None:
    """What the burst cost the node, per claim and by process, and the median it allows."""
    cores = os.cpu_count() or 1
    section.table(
        f"Node CPU per claim during the burst of {burst} (from the first create to the last Ready)",
        ["process", "CPU ms per claim"],
        [[role, round(ms, 1)] for role, ms in per_claim.items()],
    )
    section.figure(
        f"pool.burst{burst}.median_floor",
        f"earliest possible median of the burst of {burst}: {burst // 2 + burst % 2} claims' "
        f"path CPU ({', '.join(CLAIM_PATH)}) on {cores} cores",
        "ms",
        value=median_floor_ms(per_claim, burst, cores),
        headline=True,
        notes="the API server's share includes what it sends the other watchers of the pods "
        "and Sandboxes the claims change",
    )
