"""Two operator replicas on the real cluster: the Lease holder alone writes, and when it
dies the other takes over reconciling and reaping within the stated bound, with no
second pod for a Sandbox, nothing reaped twice, and nothing alive past its max age by
more than the bound.

The bound comes from the election's own timing (openblox.leadership.LeaseTiming): a
dead holder's Lease is taken within `takeover_bound_seconds`, and the loop acts within
one more pass.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from openblox.leadership import LeaseTiming
from openblox.timestamps import parse_timestamp
from tests.cluster.kubectl import Kube
from tests.cluster.sandboxes import (
    get_sandbox,
    opt_in,
    sandbox,
    sandbox_pods,
    wait_for,
    wait_reason,
)

pytestmark = pytest.mark.cluster

SYSTEM = "openblox-system"
SELECTOR = "app.kubernetes.io/name=openblox-operator"
LOOP_SECONDS = 1.0
HANDOVER_SECONDS = LeaseTiming().takeover_bound_seconds + LOOP_SECONDS
# What kubectl polling adds to a measured moment (one poll, one kubectl start-up).
POLL_SLACK_SECONDS = 3.0
CRICTL = Path("/var/lib/openblox/bin/crictl")
CONTAINERD = "unix:///run/openblox/containerd/containerd.sock"
EMBEDDED_KUBECONFIG = "/var/lib/openblox/cluster/admin.kubeconfig"


@pytest.fixture
def sandboxes_ns(operator: Kube, namespace: str) -> str:
    opt_in(operator, namespace)
    return namespace


def _running_replicas(kube: Kube) -> list[str]:
    pods = json.loads(
        kube.kubectl("get", "pods", "-n", SYSTEM, "-l", SELECTOR, "-o", "json").stdout
    )["items"]
    return sorted(
        p["metadata"]["name"]
        for p in pods
        if not p["metadata"].get("deletionTimestamp")
        and all(s.get("ready") for s in p.get("status", {}).get("containerStatuses", []))
        and p.get("status", {}).get("phase") == "Running"
    )


def _holder(kube: Kube) -> tuple[str, str]:
    """(pod, identity) of the Lease's holder; identity is `<pod>_<process>`."""
    spec = kube.get("lease", "openblox-operator", SYSTEM).get("spec") or {}
    identity = str(spec.get("holderIdentity") or "")
    return identity.rsplit("_", 1)[0], identity


def _metrics(kube: Kube, pod: str) -> dict[str, float]:
    text = kube.kubectl(
        "get", "--raw", f"/api/v1/namespaces/{SYSTEM}/pods/{pod}:9090/proxy/metrics"
    ).stdout
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def _writes(kube: Kube, pod: str) -> float:
    return _metrics(kube, pod).get('openblox_api_writes_total{outcome="sent"}', 0.0)


def _two_replicas_one_holder(kube: Kube) -> tuple[str, str]:
    """(holder pod, standby pod) once both run and one holds the Lease."""

    def settled() -> tuple[str, str] | None:
        replicas = _running_replicas(kube)
        holder, _ = _holder(kube)
        if len(replicas) != 2 or holder not in replicas:
            return None
        if _metrics(kube, holder).get("openblox_leader") != 1.0:
            return None
        standby = next(r for r in replicas if r != holder)
        return holder, standby

    result: tuple[str, str] = wait_for("two replicas, one holding the Lease", settled, 180, 2)
    return result


def _kill_process(kube: Kube, pod: str) -> None:
    """SIGKILL the operator process: it dies mid-whatever, releasing nothing. Where the
    node is not this machine, the pod is deleted with no grace instead."""
    if not CRICTL.exists() or kube.kubeconfig != EMBEDDED_KUBECONFIG:
        kube.kubectl("delete", "pod", pod, "-n", SYSTEM, "--grace-period=0", "--force")
        return
    crictl = [str(CRICTL), "--runtime-endpoint", CONTAINERD]
    container = subprocess.run(
        [*crictl, "ps", "-q", "--label", f"io.kubernetes.pod.name={pod}", "--name", "operator"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()[0]
    info = json.loads(
        subprocess.run(
            [*crictl, "inspect", container], capture_output=True, text=True, check=True
        ).stdout
    )
    os.kill(int(info["info"]["pid"]), signal.SIGKILL)


def _created(body: dict[str, Any]) -> float:
    return parse_timestamp(body["metadata"]["creationTimestamp"]).timestamp()


def _one_pod_each(kube: Kube, namespace: str) -> None:
    owners = [p["metadata"]["ownerReferences"][0]["name"] for p in sandbox_pods(kube, namespace)]
    assert len(owners) == len(set(owners)), f"a Sandbox has two pods: {owners}"


def test_two_replicas_and_only_the_lease_holder_writes(operator: Kube, sandboxes_ns: str) -> None:
    holder, standby = _two_replicas_one_holder(operator)
    standby_writes, holder_writes = _writes(operator, standby), _writes(operator, holder)
    operator.apply(sandbox("written-once", sandboxes_ns))
    wait_reason(operator, "written-once", sandboxes_ns, "Ready")
    assert _holder(operator)[0] == holder, "the Lease moved during the test"
    # The standby saw the Sandbox Ready (its watches are warm; its gauge is set every
    # 5 s) but sent no write at all.
    standby_metrics = wait_for(
        "the standby's gauge to count the Ready Sandbox",
        lambda: (
            m
            if (m := _metrics(operator, standby)).get(
                'openblox_sandboxes{ready="True",reason="Ready"}', 0
            )
            >= 1
            else None
        ),
        timeout=15,
        every=1,
    )
    assert standby_metrics.get("openblox_leader") == 0.0
    assert _writes(operator, standby) == standby_writes
    assert _writes(operator, holder) > holder_writes
    # Events the operator wrote (the pod's own, of the same name, come from the scheduler
    # and the kubelet) name the holder.
    instances = {
        e.get("reportingInstance")
        for e in operator.events(sandboxes_ns, "written-once")
        if e.get("reportingComponent") == "openblox.sh/openblox-operator"
    }
    assert instances <= {holder}, instances
    _one_pod_each(operator, sandboxes_ns)


def test_killing_the_leader_hands_reconciling_and_reaping_over_within_the_bound(
    operator: Kube, sandboxes_ns: str
) -> None:
    holder, standby = _two_replicas_one_holder(operator)
    _, old_identity = _holder(operator)
    operator.apply(sandbox("before", sandboxes_ns))
    # Due to expire while the Lease is between holders.
    operator.apply(sandbox("expiring", sandboxes_ns, maxAgeSeconds=30))
    wait_reason(operator, "before", sandboxes_ns, "Ready")
    ready = wait_reason(operator, "expiring", sandboxes_ns, "Ready")
    deadline = _created(ready) + 30
    uid = ready["metadata"]["uid"]

    killed = time.time()
    _kill_process(operator, holder)
    operator.apply(sandbox("after", sandboxes_ns))

    def new_holder() -> str | None:
        _, identity = _holder(operator)
        return identity if identity and identity != old_identity else None

    wait_for("a new Lease holder", new_holder, HANDOVER_SECONDS + 30, 0.5)
    handover = time.time() - killed
    assert handover <= HANDOVER_SECONDS + POLL_SLACK_SECONDS, (
        f"the Lease changed hands {handover:.1f}s after the kill"
    )

    gone = wait_for(
        "the expiring Sandbox reaped",
        lambda: time.time() if get_sandbox(operator, "expiring", sandboxes_ns) is None else None,
        timeout=max(deadline - time.time(), 0) + HANDOVER_SECONDS + 30,
        every=0.5,
    )
    late = gone - max(deadline, killed)
    assert gone - deadline <= HANDOVER_SECONDS + POLL_SLACK_SECONDS, (
        f"alive {gone - deadline:.1f}s past its max age ({late:.1f}s after the later of "
        "deadline and kill)"
    )

    wait_reason(operator, "after", sandboxes_ns, "Ready", timeout=HANDOVER_SECONDS + 120)
    _one_pod_each(operator, sandboxes_ns)
    before = get_sandbox(operator, "before", sandboxes_ns)
    assert before is not None  # taking over reaps nothing that has time left

    expired = [
        e
        for e in operator.events(sandboxes_ns, "expiring")
        if e["reason"] == "Expired" and e["involvedObject"].get("uid") == uid
    ]
    assert len(expired) == 1, f"reaped more than once: {expired}"
    new_pod, _ = _holder(operator)
    # Reaped by whoever held the Lease then: the killed process died without writing it
    # unless the deadline came before the kill.
    if deadline > killed + 1:
        assert expired[0].get("reportingInstance") == new_pod, expired[0]
    assert new_pod in (holder, standby)  # the killed pod's container restarts in place

    # Both replicas come back; the restarted process stands by.
    operator.kubectl(
        "rollout", "status", "deployment/openblox-operator", "-n", SYSTEM, "--timeout=180s"
    )
    _two_replicas_one_holder(operator)
