"""The conformance suite's canaries on a busy node, and what it says when one fails.

On a fresh clone, `make test` once failed 12 properties with only "canary-net ended:
Failed". The canaries named their node in spec.nodeName, which skips the scheduler: the
kubelet then admits the pod on its own and fails it at once (OutOfcpu) if the node's
CPU requests are full at that moment, as they are while an earlier test's sandboxes
shut down. These tests fill the node, show that rejection, and show the canaries now
wait in the scheduler's queue instead and start once there is room.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from openblox.conformance.canaries import NET, Canaries
from openblox.conformance.cluster_api import Kube as ApiKube
from openblox.conformance.cluster_api import PodEnded
from openblox.conformance.settings import DEFAULT_IMAGE
from openblox.transport import path
from tests.cluster.capacity import node_rooms
from tests.cluster.kubectl import Kube

pytestmark = pytest.mark.cluster


@pytest.fixture
def api(kube: Kube) -> ApiKube:
    return ApiKube.connect(kube.kubeconfig)


@pytest.fixture
def scratch(api: ApiKube) -> Iterator[str]:
    name = f"t-canaries-{secrets.token_hex(3)}"
    api.api.post(path(plural="namespaces"), {"metadata": {"name": name}})
    yield name
    api.delete_namespace(name)


def _pod(name: str, command: list[str], cpu: str, node: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
        "automountServiceAccountToken": False,
        "containers": [
            {
                "name": "c",
                "image": DEFAULT_IMAGE,
                "imagePullPolicy": "Never",
                "command": command,
                "resources": {"requests": {"cpu": cpu, "memory": "16Mi"}},
            }
        ],
    }
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def test_a_failed_pod_is_reported_with_exit_code_log_tail_and_events(
    api: ApiKube, scratch: str
) -> None:
    dies = _pod("dies", ["sh", "-c", "echo starting; echo last words >&2; exit 3"], "1m")
    # Without a readiness probe the container reads Ready for the moment it runs, and the
    # wait could return that instead of the ending this test is about.
    dies["spec"]["containers"][0]["readinessProbe"] = {"exec": {"command": ["false"]}}
    api.api.post(path(plural="pods", namespace=scratch), dies)
    with pytest.raises(PodEnded) as ended:
        api.wait_pod(scratch, "dies", 120)
    said = str(ended.value)
    assert "exit code 3" in said, said
    assert "last words" in said, said
    assert "events: " in said and "Started" in said, said
    assert not ended.value.rejected_at_admission


@contextlib.contextmanager
def _node_filled(api: ApiKube, kube: Kube, namespace: str) -> Iterator[str]:
    """A placeholder pod holding all but 5m of the node's free CPU.

    The kubelet's count of what is in use can differ for a moment from what the API shows
    (a pod it is still tearing down): when it refuses the placeholder, the next one holds
    what the kubelet said was free, less the same 5m."""
    room = max(node_rooms(kube), key=lambda r: r.free.cpu_millis)
    hold = room.free.cpu_millis - 5
    for attempt in range(1, 4):
        if hold < 50:
            pytest.fail(f"the node is already full, nothing to fill: {room.describe()}")
        name = f"placeholder-{attempt}"
        api.api.post(
            path(plural="pods", namespace=namespace),
            _pod(name, ["sleep", "infinity"], f"{hold}m", room.node),
        )
        try:
            api.wait_pod(namespace, name, 120)
            break
        except PodEnded as ended:
            counted = KUBELET_COUNT.search(str(ended))
            if not (ended.rejected_at_admission and counted) or attempt == 3:
                raise
            hold = int(counted["capacity"]) - int(counted["used"]) - 5
    try:
        yield room.node
    finally:
        with contextlib.suppress(Exception):
            api.delete_pod_now(namespace, name)


KUBELET_COUNT = re.compile(r"cpu, requested: \d+, used: (?P<used>\d+), capacity: (?P<capacity>\d+)")


def test_on_a_full_node_the_canaries_wait_for_room_instead_of_failing(
    api: ApiKube, kube: Kube, scratch: str
) -> None:
    with _node_filled(api, kube, scratch) as node:
        # What the canaries used to do: name the node. The kubelet refuses the pod.
        api.api.post(
            path(plural="pods", namespace=scratch), _pod("named", ["sleep", "60"], "10m", node)
        )
        with pytest.raises(PodEnded) as ended:
            api.wait_pod(scratch, "named", 60)
        assert ended.value.rejected_at_admission, str(ended.value)
        assert "OutOfcpu" in str(ended.value), str(ended.value)

        canaries = Canaries(
            api, scratch, image=DEFAULT_IMAGE, pull_policy="Never", node_name=node, node_ip=None
        )
        outcome: dict[str, Any] = {}
        starter = threading.Thread(
            target=lambda: outcome.update(error=_start(canaries)), daemon=True
        )
        starter.start()
        deadline = time.monotonic() + 60
        pending = ""
        while time.monotonic() < deadline and "Insufficient cpu" not in pending:
            pod = api.read_pod(scratch, NET) or {}
            pending = api.explain_pod(scratch, NET, pod) if pod else ""
            time.sleep(1)
        assert "Insufficient cpu" in pending, pending
        assert (api.read_pod(scratch, NET) or {}).get("status", {}).get("phase") == "Pending"
    starter.join(150)
    assert not starter.is_alive()
    assert outcome["error"] is None, outcome["error"]
    assert canaries.addresses.net_pod


def _start(canaries: Canaries) -> str | None:
    try:
        canaries.start(timeout=120)
    except Exception as error:
        return f"{type(error).__name__}: {error}"
    return None
