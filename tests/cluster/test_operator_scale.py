"""The operator's memory through a burst: a thousand Sandboxes created at once, each with
its pod, cost the replica holding the Lease little more than the caches keep.

The scale benchmark (docs/scale.md) found the operator OOM-killed near 2,000 Sandboxes
with pods: every watch event waited for a handler thread while its whole body was held,
so memory grew with the backlog of a burst. The pods here go to no node (their
RuntimeClass selects a label no node has), so the burst takes no room from other users'
sandboxes; the operator still creates each pod and sees its events.
"""

from __future__ import annotations

import json
import threading
import time

import pytest
import yaml

from tests.cluster.kubectl import Kube
from tests.cluster.sandboxes import (
    admission_has,
    extra_profiles,
    opt_in,
    profile_yaml,
    sandbox,
    wait_for,
)
from tests.cluster.test_operator import _operator_metrics, _sample

pytestmark = pytest.mark.cluster

BURST = 1000
# What the burst may add to a fresh holder's resident memory, at most. Measured on the
# embedded node (6 December 2026): 38.5 KiB a Sandbox before the work queue (ADR 0022),
# 21 KiB after it, of which about 6 KiB is what the caches keep for a Sandbox and its
# pod; the rest is what Python's allocator keeps of the burst's garbage.
BUDGET_MIB = BURST * 28 / 1024
NOWHERE = "test-nowhere"


def _holder_rss_mib(kube: Kube) -> float:
    value = _sample(_operator_metrics(kube), "process_resident_memory_bytes")
    assert value is not None, "the operator's /metrics has no process_resident_memory_bytes"
    return value / 2**20


def _operator_pods(kube: Kube, output: str, *selectors: str) -> str:
    """The operator's pods, as `kubectl get -o OUTPUT` prints them."""
    return kube.kubectl(
        "get",
        "pods",
        "-n",
        "openblox-system",
        "-l",
        "app.kubernetes.io/name=openblox-operator",
        *selectors,
        "-o",
        output,
    ).stdout


def _restarts(kube: Kube) -> dict[str, int]:
    """Each operator replica's restarts, by pod name (a replica of a rollout that is
    still ending comes and goes; only a pod seen twice can have restarted between)."""
    out = _operator_pods(
        kube,
        "jsonpath={range .items[*]}{.metadata.name} "
        "{.status.containerStatuses[0].restartCount}{'\\n'}{end}",
    )
    return {name: int(count) for name, count in (line.split() for line in out.splitlines())}


def _fresh_operator(kube: Kube) -> None:
    """Replicas started for this test: memory a process freed earlier (say, after a
    bench's burst) would otherwise absorb this burst and hide what it costs."""
    kube.kubectl("rollout", "restart", "deployment/openblox-operator", "-n", "openblox-system")
    kube.kubectl(
        "rollout",
        "status",
        "deployment/openblox-operator",
        "-n",
        "openblox-system",
        "--timeout=180s",
        timeout=200,
    )
    # A replaced pod stays Running while it terminates, and may still hold the Lease for a
    # moment: only pods not being deleted are the restarted replicas.
    pods = json.loads(_operator_pods(kube, "json", "--field-selector=status.phase=Running"))
    names = {
        pod["metadata"]["name"]
        for pod in pods["items"]
        if not pod["metadata"].get("deletionTimestamp")
    }

    def new_holder() -> bool:
        lease = kube.get("lease", "openblox-operator", "openblox-system")
        return str(lease["spec"].get("holderIdentity") or "").rsplit("_", 1)[0] in names

    wait_for("a restarted replica holding the Lease", new_holder, timeout=120)
    time.sleep(10)  # its first listings and the takeover pass


def _pods_made(kube: Kube, namespace: str) -> int:
    out = kube.kubectl(
        "get", "pods", "-n", namespace, "-l", "openblox.sh/sandbox", "-o", "name"
    ).stdout
    return len(out.split())


def test_a_burst_of_a_thousand_sandboxes_with_pods_costs_the_operator_little_memory(
    operator: Kube, namespace: str
) -> None:
    opt_in(operator, namespace)
    operator.apply(
        {
            "apiVersion": "node.k8s.io/v1",
            "kind": "RuntimeClass",
            "metadata": {"name": NOWHERE},
            "handler": "runsc",
            "scheduling": {"nodeSelector": {"openblox.sh/test-nowhere": "no-node-has-this"}},
        }
    )
    profile = profile_yaml(
        unsafe=True,
        runtimeClassName=NOWHERE,
        resources={"cpu": "10m", "memory": "64Mi", "scratch": "8Mi"},
    )
    samples: list[float] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(1.0):
            try:
                samples.append(_holder_rss_mib(operator))
            except Exception:  # a read that failed mid-burst is one sample fewer
                continue

    try:
        with extra_profiles(operator, {NOWHERE: profile}):
            wait_for("admission params", lambda: admission_has(operator, NOWHERE), 30)
            _fresh_operator(operator)
            restarts = _restarts(operator)
            before = _holder_rss_mib(operator)
            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            burst = {
                "apiVersion": "v1",
                "kind": "List",
                "items": [sandbox(f"b{i:04d}", namespace, profile=NOWHERE) for i in range(BURST)],
            }
            started = time.monotonic()
            operator.kubectl("create", "-f", "-", stdin=yaml.safe_dump(burst), timeout=600)
            created = time.monotonic() - started
            wait_for(
                f"a pod for each of {BURST} Sandboxes",
                lambda: _pods_made(operator, namespace) >= BURST,
                timeout=600,
                every=3,
            )
            time.sleep(5)  # the last pods' events
            stop.set()
            sampler.join(timeout=30)
            peak = max(samples, default=before)
            grew = peak - before
            print(
                f"{BURST} Sandboxes created in {created:.1f} s; holder RSS {before:.1f} MiB "
                f"before, peak {peak:.1f} MiB (+{grew:.1f}, {grew * 1024 / BURST:.1f} KiB "
                f"a Sandbox), {len(samples)} samples"
            )
            after = _restarts(operator)
            restarted = [
                name for name in restarts if after.get(name, restarts[name]) > restarts[name]
            ]
            assert not restarted, f"operator replicas restarted during the burst: {restarted}"
            assert grew <= BUDGET_MIB, (
                f"the burst grew the operator's memory by {grew:.1f} MiB "
                f"({before:.1f} -> {peak:.1f}), more than {BUDGET_MIB:.1f} MiB"
            )
    finally:
        stop.set()
        operator.kubectl(
            "delete", "sandboxes", "--all", "-n", namespace, "--wait=false", check=False
        )
        operator.kubectl("delete", "runtimeclass", NOWHERE, "--wait=false", check=False)
