"""A Pending sandbox pod's events are read for a missing runtime handler only when its
node does not report that handler: with thousands of pods Pending at once (a full
cluster, slow image pulls, simulated nodes), a read per pod every few seconds was the
operator's largest cost."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from openblox.controller.requeue import Requeue
from openblox.controller.runtime_checks import RuntimeChecks
from openblox.controller.watched import Watched
from tests.unit.factories import CREATED, default_profile
from tests.unit.test_operator_loop import FakeKube

NOW = CREATED + timedelta(seconds=30)
KEY = ("team-a", "s1")
EVENTS = "/api/v1/namespaces/team-a/events"


def _pod(node: str | None, phase: str = "Pending") -> dict[str, Any]:
    spec = {"nodeName": node} if node else {}
    return {
        "metadata": {
            "name": "s1",
            "namespace": "team-a",
            "uid": "pod-1",
            "creationTimestamp": CREATED.strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
        "spec": spec,
        "status": {"phase": phase},
    }


def _node(handlers: list[str] | None) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if handlers is not None:
        status["runtimeHandlers"] = [{"name": h, "features": {}} for h in handlers]
    return {"metadata": {"name": "n1"}, "status": status}


def _checks(kube: FakeKube, clock: list[float]) -> RuntimeChecks:
    watched = Watched()
    watched.runtime_class_seen("gvisor", "runsc")
    return RuntimeChecks(
        kube,  # type: ignore[arg-type]
        watched,
        network_policy_enforced=False,
        clock=lambda: clock[0],
    )


def test_a_pod_waiting_for_a_node_costs_no_request() -> None:
    kube, requeue = FakeKube(), Requeue()
    checks = _checks(kube, [0.0])
    assert checks.creation_failure(requeue, KEY, _pod(None), default_profile(), NOW) is None
    assert kube.take() == []


def test_a_node_that_reports_the_handler_is_asked_once_and_no_events_are_read() -> None:
    kube, requeue, clock = FakeKube(), Requeue(), [0.0]
    kube.objects["/api/v1/nodes/n1"] = _node(["runc", "runsc"])
    checks = _checks(kube, clock)
    for _ in range(3):
        assert checks.creation_failure(requeue, KEY, _pod("n1"), default_profile(), NOW) is None
    assert kube.take() == [("GET", "/api/v1/nodes/n1")]
    assert len(requeue) == 0  # nothing to look at again: pod events bring what comes
    clock[0] = 61.0  # a node's handlers can change (a runtime installed or removed)
    checks.creation_failure(requeue, KEY, _pod("n1"), default_profile(), NOW)
    assert kube.take() == [("GET", "/api/v1/nodes/n1")]


def test_a_node_without_the_handler_has_the_pods_events_read_and_a_missing_one_is_final() -> None:
    kube, requeue = FakeKube(), Requeue()
    kube.objects["/api/v1/nodes/n1"] = _node(["runc"])
    kube.objects[EVENTS] = {
        "items": [{"message": 'no runtime for "runsc" is configured', "reason": "x"}]
    }
    found = _checks(kube, [0.0]).creation_failure(requeue, KEY, _pod("n1"), default_profile(), NOW)
    assert (
        found == 'the node could not start the pod\'s runtime: no runtime for "runsc" is configured'
    )
    assert ("GET", EVENTS) in kube.take()


def test_a_node_that_reports_no_handlers_has_the_pods_events_read() -> None:
    kube, requeue = FakeKube(), Requeue()
    kube.objects["/api/v1/nodes/n1"] = _node(None)
    kube.objects[EVENTS] = {"items": []}
    checks = _checks(kube, [0.0])
    assert checks.creation_failure(requeue, KEY, _pod("n1"), default_profile(), NOW) is None
    assert kube.take() == [("GET", "/api/v1/nodes/n1"), ("GET", EVENTS)]
    assert len(requeue) == 1  # looked at again, backing off


def test_a_running_pod_settles_the_wait() -> None:
    kube, requeue = FakeKube(), Requeue()
    requeue.after(KEY, 3.0)
    checks = _checks(kube, [0.0])
    assert (
        checks.creation_failure(requeue, KEY, _pod("n1", "Running"), default_profile(), NOW) is None
    )
    assert len(requeue) == 0
    assert kube.take() == []


def test_a_node_no_pod_asks_about_again_is_forgotten() -> None:
    kube, requeue, clock = FakeKube(), Requeue(), [0.0]
    for name in ("n1", "n2", "n3"):
        kube.objects[f"/api/v1/nodes/{name}"] = {**_node(["runsc"]), "metadata": {"name": name}}
    checks = _checks(kube, clock)
    for name in ("n1", "n2", "n3"):
        checks.creation_failure(requeue, KEY, _pod(name), default_profile(), NOW)
    assert checks.nodes_remembered == 3

    clock[0] = 30.0  # within the TTL: nothing is read, nothing forgotten
    checks.creation_failure(requeue, KEY, _pod("n1"), default_profile(), NOW)
    assert checks.nodes_remembered == 3

    clock[0] = 61.0  # n2 and n3 (removed by an autoscaler, say) are never asked about again
    checks.creation_failure(requeue, KEY, _pod("n1"), default_profile(), NOW)
    assert checks.nodes_remembered == 1
