"""The hand-out's decisions, against a fake API server that enforces resourceVersion.

What the real API server does with two hand-outs of one pod is tested on the cluster
(tests/cluster/test_pool.py); here, what the operator does with each answer.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from openblox.builders.pod import build_pool_pod
from openblox.controller.events import EventRecorder
from openblox.controller.kube import ApiError, refusal_reason
from openblox.controller.namespaces import Namespaces
from openblox.controller.pool_keeper import PoolKeeper
from openblox.controller.pool_store import PoolStore
from openblox.controller.reconcile import Reconciler
from openblox.controller.runtime_checks import RuntimeChecks
from openblox.controller.unprepared_nodes import UnpreparedNodes
from openblox.controller.watched import Watched
from openblox.models import Sandbox
from openblox.models.pool import Pool
from tests.unit.factories import default_profile, sandbox_body
from tests.unit.test_operator_loop import FakeKube, _cached, _operator, _uid, _watch_everything

PODS = "/api/v1/namespaces/team-a/pods"
POOL = Pool("warm", "code-exec", ("team-a",), 2)
READY = {
    "phase": "Running",
    "startTime": "2025-01-02T03:04:05Z",
    "conditions": [{"type": "Ready", "status": "True"}],
}


def merge(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """RFC 7386 merge patch."""
    result = copy.deepcopy(target)
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merge(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result


class PodServer(FakeKube):
    """Pods with resourceVersions: a patch naming an old version gets 409, as it would."""

    def __init__(self) -> None:
        super().__init__()
        self.version = 100

    def add_pod(self, name: str, **annotations: str) -> dict[str, Any]:
        pod = build_pool_pod(POOL, "team-a", default_profile(), "abcde")
        self.version += 1
        pod["metadata"].update(
            {
                "name": name,
                "uid": f"uid-{name}",
                "resourceVersion": str(self.version),
                "creationTimestamp": "2025-01-02T03:04:05Z",
            }
        )
        pod["metadata"]["annotations"].update(annotations)
        pod["status"] = dict(READY)
        self.objects[f"{PODS}/{name}"] = pod
        return pod

    def bump(self, name: str, change: dict[str, Any]) -> None:
        """Someone else wrote the pod (a status update, another hand-out)."""
        self.version += 1
        pod = merge(self.objects[f"{PODS}/{name}"], change)
        pod["metadata"]["resourceVersion"] = str(self.version)
        self.objects[f"{PODS}/{name}"] = pod

    def patch(self, target: str, body: Any, content_type: str = "") -> dict[str, Any]:
        if not target.startswith(f"{PODS}/"):
            return super().patch(target, body, content_type)
        self.calls.append(("PATCH", target))
        current = self.objects.get(target)
        if current is None:
            raise ApiError(404, "NotFound")
        wanted = (body.get("metadata") or {}).get("resourceVersion")
        if wanted is not None and wanted != current["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict")
        self.bump(target.rsplit("/", 1)[1], body)
        return copy.deepcopy(self.objects[target])

    def get(self, target: str, **params: Any) -> dict[str, Any]:
        if target == PODS:
            self.calls.append(("GET", target))
            selector = params.get("labelSelector", "")
            key, _, value = selector.partition("=")
            items = [
                copy.deepcopy(p)
                for path, p in self.objects.items()
                if path.startswith(f"{PODS}/") and p["metadata"]["labels"].get(key) == value
            ]
            return {"items": items}
        return super().get(target, **params)


def _pooled_operator(
    *, sole_hand_out: Callable[[Sandbox], bool] = lambda sandbox: False
) -> tuple[PodServer, Reconciler, Watched, Any]:
    server = PodServer()
    store = PoolStore(server, EventRecorder(FakeKube(), "test"))  # type: ignore[arg-type]
    store.apply({"data": {"warm": "profile: code-exec\nnamespaces: [team-a]\nsize: 2\n"}})
    reconciler, watched, cache = _operator(server, pools=store, sole_hand_out=sole_hand_out)
    _watch_everything(watched)
    return server, reconciler, watched, cache


def test_a_sandbox_a_pool_serves_gets_a_probed_warm_pod_in_three_requests() -> None:
    server, reconciler, watched, cache = _pooled_operator()
    watched.pod_seen(server.add_pod("warm.aaaaa", **{"openblox.sh/boundary": "gvisor"}))
    sandbox = _cached(cache)
    reconciler.reconcile(sandbox, "sandbox")
    assert server.take() == [
        ("GET", PODS),  # finds a pod an earlier operator handed out but never reported
        ("PATCH", f"{PODS}/warm.aaaaa"),
        ("PATCH", "/apis/openblox.sh/v1alpha1/namespaces/team-a/sandboxes/demo/status"),
    ]
    pod = server.objects[f"{PODS}/warm.aaaaa"]
    assert pod["metadata"]["labels"]["openblox.sh/sandbox"] == "demo"
    assert "openblox.sh/pool" not in pod["metadata"]["labels"]
    assert pod["metadata"]["ownerReferences"][0]["uid"] == sandbox.uid
    settled = cache.get("team-a", "demo")
    assert settled is not None and settled.status["podName"] == "warm.aaaaa"
    assert settled.status["boundary"] == "gvisor"  # probed while warm, not again
    reconciler.reconcile(settled, "resync")
    assert server.take() == []


def test_a_trigger_that_waited_with_an_older_copy_writes_no_second_status() -> None:
    # The pod event of the hand-out is handled beside the reconcile that made it: it takes
    # the Sandbox from the cache before that reconcile has written the status, then waits
    # for the Sandbox's lock. It must reconcile what the cache holds by then.
    server, reconciler, watched, cache = _pooled_operator(sole_hand_out=lambda sandbox: True)
    watched.pod_seen(server.add_pod("warm.aaaaa", **{"openblox.sh/boundary": "gvisor"}))
    before_the_status = _cached(cache)
    reconciler.reconcile(before_the_status, "sandbox")
    server.take()
    reconciler.reconcile(before_the_status, "pod")
    assert server.take() == []


def test_a_sandbox_made_after_this_replica_took_the_lease_is_handed_a_pod_in_two() -> None:
    server, reconciler, watched, cache = _pooled_operator(sole_hand_out=lambda sandbox: True)
    watched.pod_seen(server.add_pod("warm.aaaaa", **{"openblox.sh/boundary": "gvisor"}))
    reconciler.reconcile(_cached(cache), "sandbox")
    # Every hand-out to it was this process's own, so there is none to look for.
    assert server.take() == [
        ("PATCH", f"{PODS}/warm.aaaaa"),
        ("PATCH", "/apis/openblox.sh/v1alpha1/namespaces/team-a/sandboxes/demo/status"),
    ]


def test_a_hand_out_that_failed_unanswered_is_looked_for_before_another() -> None:
    server, reconciler, watched, cache = _pooled_operator(sole_hand_out=lambda sandbox: True)
    sandbox = _cached(cache)
    watched.pod_seen(server.add_pod("warm.lost", **{"openblox.sh/boundary": "gvisor"}))
    watched.pod_seen(server.add_pod("warm.spare", **{"openblox.sh/boundary": "gvisor"}))
    patch = server.patch

    def lands_then_times_out(target: str, body: Any, content_type: str = "") -> dict[str, Any]:
        patch(target, body, content_type)  # the API server applied it; the answer is lost
        raise ApiError(504, "Gateway Timeout")

    server.patch = lands_then_times_out  # type: ignore[method-assign]
    with pytest.raises(ApiError):
        reconciler.reconcile(sandbox, "sandbox")
    server.patch = patch  # type: ignore[method-assign]
    server.take()
    reconciler.reconcile(sandbox, "requeue")
    calls = server.take()
    assert calls[0] == ("GET", PODS)
    assert not any(m in ("PATCH", "POST") and t.startswith(PODS) for m, t in calls)
    assert cache.get("team-a", "demo").status["podName"] == "warm.lost"
    assert server.objects[f"{PODS}/warm.spare"]["metadata"]["labels"]["openblox.sh/pool"]


def test_an_unprobed_or_stale_pool_pod_is_not_handed_out_and_the_sandbox_goes_cold() -> None:
    server, reconciler, watched, cache = _pooled_operator()
    watched.pod_seen(server.add_pod("warm.unprobed"))
    stale = server.add_pod("warm.stale", **{"openblox.sh/boundary": "gvisor"})
    stale["metadata"]["annotations"]["openblox.sh/profile-digest"] = "old"
    watched.pod_seen(stale)
    reconciler.reconcile(_cached(cache), "sandbox")
    calls = server.take()
    assert ("POST", PODS) in calls
    assert not any(m == "PATCH" and t.startswith(f"{PODS}/") for m, t in calls)


def test_a_lost_race_takes_another_pod() -> None:
    server, reconciler, watched, cache = _pooled_operator()
    first = server.add_pod("warm.first", **{"openblox.sh/boundary": "gvisor"})
    watched.pod_seen(first)
    watched.pod_seen(server.add_pod("warm.second", **{"openblox.sh/boundary": "gvisor"}))
    # Another operator handed "first" out after our watch showed it.
    server.bump(
        "warm.first",
        {
            "metadata": {
                "labels": {"openblox.sh/sandbox": "other", "openblox.sh/pool": None},
                "ownerReferences": [{"uid": "someone-else", "controller": True}],
            }
        },
    )
    reconciler.reconcile(_cached(cache), "sandbox")
    calls = server.take()
    assert calls[1:5] == [
        ("PATCH", f"{PODS}/warm.first"),  # 409
        ("GET", f"{PODS}/warm.first"),  # taken: not retried
        ("PATCH", f"{PODS}/warm.second"),
        ("PATCH", "/apis/openblox.sh/v1alpha1/namespaces/team-a/sandboxes/demo/status"),
    ]
    assert server.objects[f"{PODS}/warm.first"]["metadata"]["ownerReferences"][0]["uid"] == (
        "someone-else"
    )


def test_a_pod_changed_but_still_free_is_claimed_at_its_new_version() -> None:
    server, reconciler, watched, cache = _pooled_operator()
    watched.pod_seen(server.add_pod("warm.only", **{"openblox.sh/boundary": "gvisor"}))
    server.bump("warm.only", {"status": {"podIP": "10.0.0.9"}})  # the kubelet wrote status
    reconciler.reconcile(_cached(cache), "sandbox")
    calls = server.take()
    assert calls[1:4] == [
        ("PATCH", f"{PODS}/warm.only"),
        ("GET", f"{PODS}/warm.only"),
        ("PATCH", f"{PODS}/warm.only"),
    ]
    assert server.objects[f"{PODS}/warm.only"]["metadata"]["labels"]["openblox.sh/sandbox"] == (
        "demo"
    )


def test_the_last_pod_lost_falls_back_to_a_cold_create() -> None:
    server, reconciler, watched, cache = _pooled_operator()
    watched.pod_seen(server.add_pod("warm.only", **{"openblox.sh/boundary": "gvisor"}))
    server.bump("warm.only", {"metadata": {"ownerReferences": [{"uid": "x", "controller": True}]}})
    reconciler.reconcile(_cached(cache), "sandbox")
    calls = server.take()
    assert ("POST", PODS) in calls
    assert cache.get("team-a", "demo").status["podName"] == "demo"


def test_a_pod_handed_out_before_a_crash_is_adopted_not_doubled() -> None:
    server, reconciler, watched, cache = _pooled_operator()
    sandbox = _cached(cache)
    # The earlier operator's hand-out landed; this one's watch has not shown it yet.
    server.add_pod("warm.before", **{"openblox.sh/boundary": "gvisor"})
    server.bump(
        "warm.before",
        {
            "metadata": {
                "labels": {"openblox.sh/sandbox": "demo", "openblox.sh/pool": None},
                "ownerReferences": [{"uid": sandbox.uid, "controller": True}],
            }
        },
    )
    watched.pod_seen(server.add_pod("warm.spare", **{"openblox.sh/boundary": "gvisor"}))
    reconciler.reconcile(sandbox, "sandbox")
    calls = server.take()
    assert not any(m in ("PATCH", "POST") and t.startswith(PODS) for m, t in calls)
    assert cache.get("team-a", "demo").status["podName"] == "warm.before"


def test_a_stale_watch_event_never_gives_a_handed_out_pod_back_to_the_pool() -> None:
    watched = Watched()
    server = PodServer()
    before = server.add_pod("warm.x")
    server.bump(
        "warm.x",
        {
            "metadata": {
                "labels": {"openblox.sh/sandbox": "demo", "openblox.sh/pool": None},
                "ownerReferences": [{"uid": "s", "controller": True}],
            }
        },
    )
    watched.pod_seen(server.objects[f"{PODS}/warm.x"])
    watched.pod_seen(before)  # an older event, delivered after the hand-out's answer
    assert watched.pool_pods() == []
    assert [p["metadata"]["name"] for p in watched.pod_owned_by("team-a", "s")] == ["warm.x"]


def test_a_second_pod_owned_by_one_sandbox_is_deleted() -> None:
    server, reconciler, watched, cache = _pooled_operator()
    sandbox = _cached(cache)
    for name in ("warm.one", "warm.two"):
        server.add_pod(name, **{"openblox.sh/boundary": "gvisor"})
        server.bump(
            name,
            {
                "metadata": {
                    "labels": {"openblox.sh/sandbox": "demo", "openblox.sh/pool": None},
                    "ownerReferences": [{"uid": sandbox.uid, "controller": True}],
                }
            },
        )
        watched.pod_seen(server.objects[f"{PODS}/{name}"])
    reconciler.reconcile(sandbox, "sandbox")
    calls = server.take()
    assert calls.count(("DELETE", f"{PODS}/warm.two")) == 1
    assert ("DELETE", f"{PODS}/warm.one") not in calls


def test_a_quota_refusal_reads_the_same_for_every_pod_it_refuses() -> None:
    def refused(pod: str) -> ApiError:
        message = (
            f'pods "{pod}" is forbidden: exceeded quota: small, requested: pods=1, '
            "used: pods=3, limited: pods=3"
        )
        return ApiError(403, "Forbidden", json.dumps({"kind": "Status", "message": message}))

    first, second = refusal_reason(refused("pool.abcde")), refusal_reason(refused("pool.fghij"))

    assert (
        first == second == "exceeded quota: small, requested: pods=1, used: pods=3, limited: pods=3"
    )
    assert refusal_reason(ApiError(403, "Forbidden", "not json")) == "403 Forbidden: not json"


def _hand_out_behind_the_watch(server: PodServer, name: str, owner_uid: str) -> None:
    """A hand-out sent by a replaced operator lands after this one's watch showed the pod."""
    server.bump(
        name,
        {
            "metadata": {
                "labels": {"openblox.sh/sandbox": "demo", "openblox.sh/pool": None},
                "ownerReferences": [{"uid": owner_uid, "controller": True}],
            }
        },
    )


def test_a_hand_out_that_landed_late_for_this_sandbox_is_taken_not_doubled() -> None:
    # No read by label: the watch decides.
    server, reconciler, watched, cache = _pooled_operator(sole_hand_out=lambda _: True)
    sandbox = _cached(cache)
    watched.pod_seen(server.add_pod("warm.only", **{"openblox.sh/boundary": "gvisor"}))
    _hand_out_behind_the_watch(server, "warm.only", sandbox.uid)
    reconciler.reconcile(sandbox, "sandbox")
    calls = server.take()
    assert calls[:2] == [("PATCH", f"{PODS}/warm.only"), ("GET", f"{PODS}/warm.only")]  # 409
    assert ("POST", PODS) not in calls  # no cold pod beside it
    assert cache.get("team-a", "demo").status["podName"] == "warm.only"


def test_a_live_pod_is_kept_when_the_pod_the_status_names_is_being_deleted() -> None:
    server, reconciler, watched, cache = _pooled_operator()
    sandbox = cache.upsert(sandbox_body(name="demo", uid=_uid("demo"), status={"podName": "demo"}))
    assert sandbox is not None
    for name, deleting in (("demo", True), ("warm.one", False)):
        server.add_pod(name, **{"openblox.sh/boundary": "gvisor"})
        _hand_out_behind_the_watch(server, name, sandbox.uid)
        if deleting:
            server.bump(name, {"metadata": {"deletionTimestamp": "2025-01-02T03:05:00Z"}})
        watched.pod_seen(server.objects[f"{PODS}/{name}"])
    reconciler.reconcile(sandbox, "sandbox")
    calls = server.take()
    assert not any(method == "DELETE" for method, _ in calls), calls
    assert cache.get("team-a", "demo").status["podName"] == "warm.one"


class PreconditionedPodServer(PodServer):
    """Deletes honour `preconditions`, as the API server does."""

    def delete(self, target: str, body: Any = None) -> dict[str, Any]:
        self.calls.append(("DELETE", target))
        current = self.objects.get(target)
        if current is None:
            raise ApiError(404, "NotFound")
        for field, wanted in ((body or {}).get("preconditions") or {}).items():
            if current["metadata"][field] != wanted:
                raise ApiError(409, "Conflict")
        return self.objects.pop(target)


POOL_YAML = "profile: code-exec\nnamespaces: [team-a]\nsize: 2\n"


def _keeper(
    server: PodServer, reconciler: Reconciler, watched: Watched, pools: dict[str, str]
) -> PoolKeeper:
    """A keeper over these pools, wired as `Runtime.build` wires it, that holds the Lease."""
    store = PoolStore(server, reconciler._events)  # type: ignore[arg-type]
    store.apply({"data": pools})
    return PoolKeeper(
        server,  # type: ignore[arg-type]
        watched,
        store,
        reconciler._profiles,
        namespaces=Namespaces(server, watched),  # type: ignore[arg-type]
        runtimes=RuntimeChecks(server, watched, network_policy_enforced=False),  # type: ignore[arg-type]
        boundaries=reconciler._boundaries,
        unprepared=UnpreparedNodes(),
        held=lambda: True,
    )


def test_the_keeper_never_deletes_a_pool_pod_handed_out_since_its_watch_showed_it() -> None:
    server = PreconditionedPodServer()
    reconciler, watched, _cache = _operator(server)
    _watch_everything(watched)
    # The pool was removed: its pods serve nothing now.
    keeper = _keeper(server, reconciler, watched, pools={})
    keeper._listed = True  # the watch has shown every pool pod
    for name in ("warm.free", "warm.taken"):
        watched.pod_seen(server.add_pod(name))
    _hand_out_behind_the_watch(server, "warm.taken", "a-sandbox")
    keeper.run_once()
    assert f"{PODS}/warm.free" not in server.objects
    assert server.objects[f"{PODS}/warm.taken"]["metadata"]["ownerReferences"][0]["uid"] == (
        "a-sandbox"
    )


def test_a_pass_makes_its_pods_while_its_probes_run_and_starts_each_probe_once() -> None:
    """A pass that waited for its probes held the pool's creates back by a probe's time."""
    server = PodServer()
    reconciler, watched, _cache = _operator(server)
    _watch_everything(watched)
    server.objects["/api/v1/namespaces/team-a/resourcequotas"] = {"items": []}
    server.objects["/apis/node.k8s.io/v1/runtimeclasses/gvisor"] = {"metadata": {}}
    keeper = _keeper(server, reconciler, watched, pools={"warm": POOL_YAML})
    keeper._listed = True
    watched.pod_seen(server.add_pod("warm.unprobed"))  # Ready, its boundary not seen yet
    release, finished = threading.Event(), threading.Event()
    probed: list[str] = []

    def slow_probe(pod: dict[str, Any], pool: Pool, expected: Any) -> None:
        probed.append(pod["metadata"]["name"])
        release.wait(5)
        finished.set()

    keeper._probe = slow_probe  # type: ignore[method-assign]
    created = server.post

    def post(target: str, body: Any) -> dict[str, Any]:
        answer = created(target, body)
        answer["metadata"]["creationTimestamp"] = "2025-01-02T03:04:06Z"
        return answer

    server.post = post  # type: ignore[method-assign]
    try:
        keeper.run_once()
        assert not finished.is_set(), "the pass waited for its probe"
        assert server.take().count(("POST", PODS)) == 1  # the pool's second pod, at once
        keeper.run_once()  # the probe is still under way: it is not started again
        assert wait_until(lambda: probed == ["warm.unprobed"])
    finally:
        release.set()
    assert wait_until(lambda: not keeper._probing)
    assert probed == ["warm.unprobed"]
    keeper._probes.shutdown(wait=True)


def wait_until(condition: Callable[[], bool], seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True
