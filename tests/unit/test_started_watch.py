"""The boundary probe starts when the kubelet reports the container started, before the
pod reads Ready; the Sandbox is Ready only once both the pod and the probe say so."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from openblox.builders.pod import pod_name
from openblox.controller import pod_boundaries
from openblox.controller.boundary import ProbeVerdict
from openblox.controller.started_watch import STARTED_FIELD_PATH, started_pod
from openblox.controller.watched import Watched
from tests.unit.factories import SANDBOX_UID
from tests.unit.test_operator_loop import NOW, _cached, _ready, _watched_operator

POD_UID = "pod-uid-1"


def _pod(name: str, *, ready: bool) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": "Pending"}
    if ready:
        status = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    return {
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "uid": POD_UID,
            "creationTimestamp": (NOW - timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "ownerReferences": [
                {"kind": "Sandbox", "name": "demo", "uid": SANDBOX_UID, "controller": True}
            ],
        },
        "spec": {"nodeName": "node-1"},
        "status": status,
    }


def _started(name: str, uid: str = POD_UID, field_path: str = STARTED_FIELD_PATH) -> dict[str, Any]:
    return {
        "reason": "Started",
        "involvedObject": {
            "kind": "Pod",
            "namespace": "team-a",
            "name": name,
            "uid": uid,
            "fieldPath": field_path,
        },
    }


def test_a_started_event_marks_only_a_known_sandbox_pod_of_that_uid() -> None:
    watched = Watched()
    watched.pod_seen(_pod("demo", ready=False))

    assert started_pod(_started("demo", field_path="spec.containers{other}"), watched) is None
    assert started_pod(_started("demo", uid="an-earlier-pod"), watched) is None
    assert started_pod(_started("not-a-sandbox-pod"), watched) is None
    assert not watched.has_started(POD_UID)

    assert started_pod(_started("demo"), watched) == ("team-a", "demo")
    assert watched.has_started(POD_UID)
    watched.pod_gone("team-a", "demo", POD_UID)
    assert not watched.has_started(POD_UID)


def test_the_probe_runs_once_the_container_started_and_ready_waits_for_the_pod(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    probes: list[str] = []

    def probe(_kube: object, namespace: str, pod: str, _node: str, _needs: object) -> ProbeVerdict:
        probes.append(f"{namespace}/{pod}")
        return ProbeVerdict("gvisor")

    monkeypatch.setattr(pod_boundaries, "probe_boundary", probe)
    kube, reconciler, watched, cache = _watched_operator()
    kube.objects["/api/v1/nodes/node-1"] = {"status": {"nodeInfo": {"kernelVersion": "6.1"}}}
    sandbox = _cached(cache)
    name = pod_name(sandbox)
    watched.pod_seen(_pod(name, ready=False))

    reconciler.reconcile(sandbox, "pod")
    assert probes == []  # neither started nor Ready: nothing to probe yet

    started_pod(_started(name), watched)
    reconciler.reconcile(sandbox, "started")
    assert probes == [f"team-a/{name}"]
    assert _ready(cache) == ("False", "PodPending")

    watched.pod_seen(_pod(name, ready=True))
    latest = cache.get("team-a", "demo")
    assert latest is not None
    reconciler.reconcile(latest, "pod")
    assert probes == [f"team-a/{name}"]  # the verdict is kept for the pod's lifetime
    assert _ready(cache) == ("True", "Ready")


def test_an_early_probe_that_fails_decides_nothing_and_the_ready_pod_is_probed_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answers: list[ProbeVerdict | Exception] = [
        ConnectionError("container not running yet"),
        ProbeVerdict("gvisor"),
    ]

    def probe(
        _kube: object, _namespace: str, _pod: str, _node: str, _needs: object
    ) -> ProbeVerdict:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(pod_boundaries, "probe_boundary", probe)
    kube, reconciler, watched, cache = _watched_operator()
    kube.objects["/api/v1/nodes/node-1"] = {"status": {"nodeInfo": {"kernelVersion": "6.1"}}}
    sandbox = _cached(cache)
    name = pod_name(sandbox)
    watched.pod_seen(_pod(name, ready=False))
    started_pod(_started(name), watched)

    reconciler.reconcile(sandbox, "started")  # no exception escapes: it decided nothing
    assert _ready(cache) == ("False", "PodPending")

    watched.pod_seen(_pod(name, ready=True))
    latest = cache.get("team-a", "demo")
    assert latest is not None
    reconciler.reconcile(latest, "pod")
    assert answers == []
    assert _ready(cache) == ("True", "Ready")
