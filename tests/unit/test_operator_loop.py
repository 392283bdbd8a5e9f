"""The operator's reconcile against a fake API server: what it asks for, and when it asks nothing.

Pure parts (the gauge's counting, the caches, the requeue back-off) are checked
directly (the election has tests/unit/test_election.py); the reconcile runs with a
recording fake `Kube`, so the number of API requests per step is an asserted figure,
not a benchmark's estimate.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from openblox.builders.pod import pod_name
from openblox.controller import metrics
from openblox.controller.boundary import ProbeVerdict
from openblox.controller.deadlines import Deadlines
from openblox.controller.events import EventRecorder
from openblox.controller.kube import ApiError, path
from openblox.controller.namespaces import Namespaces
from openblox.controller.pod_boundaries import PodBoundaries
from openblox.controller.pool_claim import PoolClaimer
from openblox.controller.pool_store import PoolStore
from openblox.controller.profile_store import ProfileStore
from openblox.controller.reaper import Reaper
from openblox.controller.reconcile import Reconciler
from openblox.controller.requeue import MAX_DELAY_SECONDS, Requeue, Resyncs
from openblox.controller.runtime_checks import RuntimeChecks
from openblox.controller.sandbox_cache import SandboxCache
from openblox.controller.sandbox_pods import SandboxPods
from openblox.controller.unprepared_nodes import UnpreparedNodes
from openblox.controller.watched import (
    GONE_MEMORY_SECONDS,
    NEGATIVE_TTL_SECONDS,
    Watched,
    slim_pod,
)
from openblox.models import Sandbox, parse_sandbox
from tests.unit.factories import DEFAULT_PROFILE_YAML, SANDBOX_UID, sandbox_body

NOW = datetime(2025, 1, 2, 3, 5, 0, tzinfo=UTC)
OPTED_IN = {"openblox.sh/sandboxes": "enabled"}
PSA = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}


def _uid(name: str) -> str:
    """Real Sandboxes never share a uid: each but "demo" gets its own."""
    return SANDBOX_UID if name == "demo" else f"{SANDBOX_UID}-{name}"


class FakeKube:
    """Records every request; answers from `objects` (path -> body) or with `errors`."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.objects: dict[str, dict[str, Any]] = {}
        self.errors: dict[tuple[str, str], int] = {}

    def _answer(self, method: str, target: str, body: Any = None) -> dict[str, Any]:
        self.calls.append((method, target))
        status = self.errors.get((method, target))
        if status:
            raise ApiError(status, "Fake")
        if method == "POST":
            name = body["metadata"].get("name", "event")
            created = {**body, "metadata": {**body["metadata"], "uid": f"uid-{name}"}}
            self.objects[f"{target}/{name}"] = created
            return created
        if method == "PATCH" and target.endswith("/status"):
            # The API server answers with the whole Sandbox, status patched.
            name = target.split("/")[-2]
            return {**self.objects.get(target, sandbox_body(name=name, uid=_uid(name))), **body}
        if (
            method == "PATCH"
            and target.startswith("/api/v1/namespaces/")
            and target.count("/") == 4
        ):
            current = self.objects.get(target, {"metadata": {}})
            labels = {**current["metadata"].get("labels", {}), **body["metadata"]["labels"]}
            self.objects[target] = {"metadata": {**current["metadata"], "labels": labels}}
            return self.objects[target]
        if method in ("PATCH", "PUT"):
            return {**self.objects.get(target, {}), **body}
        if target in self.objects:
            return self.objects[target]
        if method == "GET":
            raise ApiError(404, "NotFound")
        return {}

    def get(self, target: str, **params: Any) -> dict[str, Any]:
        return self._answer("GET", target)

    def post(self, target: str, body: Any) -> dict[str, Any]:
        return self._answer("POST", target, body)

    def put(self, target: str, body: Any) -> dict[str, Any]:
        return self._answer("PUT", target, body)

    def patch(self, target: str, body: Any, content_type: str = "") -> dict[str, Any]:
        return self._answer("PATCH", target, body)

    def delete(self, target: str, body: Any = None) -> dict[str, Any]:
        return self._answer("DELETE", target, body)

    def take(self) -> list[tuple[str, str]]:
        calls, self.calls = self.calls, []
        return calls


def _operator(
    kube: FakeKube,
    *,
    requeue: Requeue | None = None,
    clock: Callable[[], datetime] = lambda: NOW,
    pools: PoolStore | None = None,
    sole_hand_out: Callable[[Sandbox], bool] = lambda sandbox: False,
) -> tuple[Reconciler, Watched, SandboxCache]:
    """The reconcile and its parts, wired as `Runtime.build` wires them (`pools`: with a
    claimer handing out their warm pods)."""
    profiles = ProfileStore()
    profiles.update({"code-exec": DEFAULT_PROFILE_YAML})
    watched = Watched()
    cache = SandboxCache()
    requeue = requeue if requeue is not None else Requeue()
    boundaries = PodBoundaries(kube, watched, requeue)  # type: ignore[arg-type]
    claimer = (
        PoolClaimer(kube, watched, pools, boundaries.of)  # type: ignore[arg-type]
        if pools is not None
        else None
    )
    reconciler = Reconciler(
        kube,  # type: ignore[arg-type]
        profiles,
        EventRecorder(kube, "test"),  # type: ignore[arg-type]
        namespaces=Namespaces(kube, watched),  # type: ignore[arg-type]
        runtimes=RuntimeChecks(kube, watched, network_policy_enforced=False),  # type: ignore[arg-type]
        pods=SandboxPods(kube, watched, claimer=claimer, sole_hand_out=sole_hand_out),  # type: ignore[arg-type]
        boundaries=boundaries,
        unprepared=UnpreparedNodes(),
        cache=cache,
        requeue=requeue,
        deadlines=Deadlines(),
        clock=clock,
    )
    return reconciler, watched, cache


def _reaper(
    kube: FakeKube,
    reconciler: Reconciler,
    cache: SandboxCache,
    *,
    election: Any,
    clock: Callable[[], datetime],
    **options: Any,
) -> Reaper:
    """The loop over this reconcile's parts, as `Runtime.build` wires it."""
    return Reaper(
        kube,  # type: ignore[arg-type]
        cache,
        reconciler._profiles,
        reconcile=reconciler.reconcile,
        requeue=reconciler._requeue,
        deadlines=reconciler._deadlines,
        resyncs=options.pop("resyncs", Resyncs()),
        events=reconciler._events,
        election=election,
        clock=clock,
        **options,
    )


def _watch_everything(watched: Watched) -> None:
    watched.namespace_seen("team-a", {**OPTED_IN, **PSA})
    watched.runtime_class_seen("gvisor")
    watched.policy_seen("team-a")


def _watched_operator() -> tuple[FakeKube, Reconciler, Watched, SandboxCache]:
    """An operator whose watches have already shown the namespace, RuntimeClass and policy."""
    kube = FakeKube()
    reconciler, watched, cache = _operator(kube)
    _watch_everything(watched)
    return kube, reconciler, watched, cache


def _ready(cache: SandboxCache, name: str = "demo") -> tuple[str, str]:
    """(status, reason) of the cached Sandbox's Ready condition, as the status patch left it."""
    sandbox = cache.get("team-a", name)
    assert sandbox is not None
    return metrics.ready_of(sandbox.conditions)


def _cached(cache: SandboxCache, name: str = "demo") -> Sandbox:
    sandbox = cache.upsert(sandbox_body(name=name, uid=_uid(name)))
    assert sandbox is not None
    return sandbox


def test_a_new_sandbox_costs_one_pod_create_and_one_status_patch() -> None:
    kube, reconciler, _watched, cache = _watched_operator()
    sandbox = _cached(cache)
    reconciler.reconcile(sandbox, "sandbox")
    assert kube.take() == [
        ("POST", "/api/v1/namespaces/team-a/pods"),
        ("PATCH", "/apis/openblox.sh/v1alpha1/namespaces/team-a/sandboxes/demo/status"),
    ]


def test_a_settled_sandbox_is_reconciled_without_a_single_request() -> None:
    kube, reconciler, watched, cache = _watched_operator()
    sandbox = _cached(cache)
    reconciler.reconcile(sandbox, "sandbox")
    kube.take()
    # The pod watch delivers the pod; the cache holds the status just written.
    created = kube.objects[f"/api/v1/namespaces/team-a/pods/{pod_name(sandbox)}"]
    watched.pod_seen(created)
    again = cache.get("team-a", "demo")
    assert again is not None and again.status  # refreshed from the patch's answer
    for _ in range(3):
        reconciler.reconcile(again, "resync")
    assert kube.take() == []


def test_namespace_runtime_class_and_policy_are_read_once_when_no_watch_has_shown_them() -> None:
    kube = FakeKube()
    kube.objects["/api/v1/namespaces/team-a"] = {"metadata": {"labels": OPTED_IN}}
    kube.objects["/apis/node.k8s.io/v1/runtimeclasses/gvisor"] = {"metadata": {}}
    reconciler, _, cache = _operator(kube)
    sandbox = _cached(cache)
    reconciler.reconcile(sandbox, "sandbox")
    calls = kube.take()
    assert calls.count(("GET", "/api/v1/namespaces/team-a")) == 1
    assert ("PATCH", "/api/v1/namespaces/team-a") in calls  # PSA labels, once
    assert calls.count(("GET", "/apis/node.k8s.io/v1/runtimeclasses/gvisor")) == 1
    assert ("POST", "/apis/networking.k8s.io/v1/namespaces/team-a/networkpolicies") in calls
    other = _cached(cache, "other")
    reconciler.reconcile(other, "sandbox")
    assert kube.take() == [
        ("POST", "/api/v1/namespaces/team-a/pods"),
        ("PATCH", "/apis/openblox.sh/v1alpha1/namespaces/team-a/sandboxes/other/status"),
    ]


def test_a_missing_runtime_class_is_asked_about_once_then_remembered() -> None:
    kube = FakeKube()
    reconciler, watched, cache = _operator(kube)
    watched.namespace_seen("team-a", {**OPTED_IN, **PSA})
    for index in range(5):
        sandbox = _cached(cache, f"s{index}")
        reconciler.reconcile(sandbox, "sandbox")
    calls = kube.take()
    assert calls.count(("GET", "/apis/node.k8s.io/v1/runtimeclasses/gvisor")) == 1
    assert not any(method == "POST" and "/pods" in target for method, target in calls)
    assert _ready(cache, "s0") == ("False", "RuntimeUnavailable")


def test_a_pod_name_taken_by_another_owner_is_reported_not_adopted() -> None:
    kube, reconciler, _watched, cache = _watched_operator()
    sandbox = _cached(cache)
    pods = "/api/v1/namespaces/team-a/pods"
    kube.errors[("POST", pods)] = 409
    kube.objects[f"{pods}/{pod_name(sandbox)}"] = {
        "metadata": {"name": pod_name(sandbox), "namespace": "team-a", "uid": "x"}
    }
    reconciler.reconcile(sandbox, "sandbox")
    assert kube.take()[:2] == [("POST", pods), ("GET", f"{pods}/{pod_name(sandbox)}")]
    assert _ready(cache)[0] == "False"


def _pod_owned_by(sandbox: Sandbox, owner: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {
            "name": pod_name(sandbox),
            "namespace": "team-a",
            "uid": "old-pod",
            "ownerReferences": [{"controller": True, **owner}],
        },
        "status": {"phase": "Running"},
    }


def test_the_pod_of_a_deleted_namesake_is_removed_not_reported_as_a_conflict() -> None:
    kube, reconciler, watched, cache = _watched_operator()
    sandbox = _cached(cache)
    earlier = {"apiVersion": "openblox.sh/v1alpha1", "kind": "Sandbox", "name": "demo"}
    watched.pod_seen(_pod_owned_by(sandbox, {**earlier, "uid": "an-earlier-demo"}))
    reconciler.reconcile(sandbox, "sandbox")
    pod_path = f"/api/v1/namespaces/team-a/pods/{pod_name(sandbox)}"
    assert ("DELETE", pod_path) in kube.take()
    assert _ready(cache) == ("False", "PodPending")


def test_a_pod_of_another_owner_is_a_conflict_and_is_left_alone() -> None:
    kube, reconciler, watched, cache = _watched_operator()
    sandbox = _cached(cache)
    watched.pod_seen(
        _pod_owned_by(sandbox, {"apiVersion": "apps/v1", "kind": "ReplicaSet", "uid": "rs"})
    )
    reconciler.reconcile(sandbox, "sandbox")
    assert not any(method == "DELETE" for method, _ in kube.take())
    assert _ready(cache) == ("False", "PodConflict")


def test_a_pending_pod_is_looked_at_again_later_not_on_a_timer() -> None:
    _kube, reconciler, watched, cache = _watched_operator()
    sandbox = _cached(cache)
    pod = {
        "metadata": {
            "name": pod_name(sandbox),
            "namespace": "team-a",
            "uid": "p1",
            "creationTimestamp": (NOW - timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "ownerReferences": [{"uid": SANDBOX_UID, "controller": True}],
        },
        # On a node that does not say which runtime handlers it has (none is known here).
        "spec": {"nodeName": "worker"},
        "status": {"phase": "Pending"},
    }
    watched.pod_seen(pod)
    reconciler.reconcile(sandbox, "pod")
    assert len(reconciler._requeue) == 1
    pod["status"] = {"phase": "Running"}
    watched.pod_seen(pod)
    reconciler.reconcile(sandbox, "pod")
    assert len(reconciler._requeue) == 0


def _evicted_from_a_lost_node(name: str, deleted: datetime) -> dict[str, Any]:
    """A pod the taint manager deleted that its (lost) node never finished: still Running."""
    return {
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "uid": "p1",
            "deletionTimestamp": deleted.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "ownerReferences": [{"uid": SANDBOX_UID, "controller": True}],
        },
        "spec": {"nodeName": "worker"},
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "Ready", "status": "False"},
                {"type": "ContainersReady", "status": "True"},
                {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager"},
            ],
        },
    }


@pytest.mark.parametrize("pod_of", [pod_name, lambda _sandbox: "pool-a.x7k2p"])
def test_a_pod_left_on_a_lost_node_is_released_when_its_grace_is_over(
    pod_of: Any,
) -> None:
    """The release comes from the requeue the Terminating pod asked for, keyed by the
    Sandbox (a warm pod keeps its pool's name), not from the next resync minutes later."""
    kube = FakeKube()
    moment = [NOW]
    ticks = [0.0]
    requeue = Requeue(clock=lambda: ticks[0])
    reconciler, watched, cache = _operator(kube, requeue=requeue, clock=lambda: moment[0])
    _watch_everything(watched)
    sandbox = _cached(cache)
    name = pod_of(sandbox)
    watched.pod_seen(_evicted_from_a_lost_node(name, NOW - timedelta(seconds=2)))

    reconciler.reconcile(sandbox, "pod")

    assert _ready(cache) == ("False", "NodeLost")
    assert not any(method == "DELETE" for method, _ in kube.take())
    assert requeue.pop_due() == []
    ticks[0] += 14.5
    moment[0] += timedelta(seconds=14.5)
    assert requeue.pop_due() == [("team-a", "demo")]
    reconciler.reconcile(sandbox, "requeue")
    assert ("DELETE", f"/api/v1/namespaces/team-a/pods/{name}") in kube.take()


def test_a_failed_reconcile_is_retried_by_the_loop() -> None:
    kube, reconciler, _watched, cache = _watched_operator()
    kube.errors[("POST", "/api/v1/namespaces/team-a/pods")] = 500
    sandbox = _cached(cache)
    with pytest.raises(ApiError):
        reconciler.reconcile(sandbox, "sandbox")
    assert len(reconciler._requeue) == 1


# --------------------------------------------------------------------------- reaper loop


def test_the_loop_resyncs_unready_sandboxes_only_when_asked_or_after_the_safety_interval() -> None:
    kube = FakeKube()
    reconciler, watched, cache = _operator(kube)
    watched.namespace_seen("team-a", {**OPTED_IN, **PSA})
    watched.runtime_class_gone("gvisor")
    _cached(cache)
    moment = [NOW]
    resyncs = Resyncs()
    reaper = Reaper(
        kube,  # type: ignore[arg-type]
        cache,
        ProfileStore(),
        reconcile=reconciler.reconcile,
        requeue=reconciler._requeue,
        deadlines=reconciler._deadlines,
        resyncs=resyncs,
        events=None,  # type: ignore[arg-type]
        election=None,  # type: ignore[arg-type]
        resync_seconds=300,
        clock=lambda: moment[0],
    )
    before = metrics.RECONCILES.labels("resync")._value.get()
    moment[0] = NOW + timedelta(seconds=60)
    reaper._maybe_resync()
    assert metrics.RECONCILES.labels("resync")._value.get() == before
    resyncs.request()
    reaper._maybe_resync()
    assert metrics.RECONCILES.labels("resync")._value.get() == before + 1
    moment[0] = NOW + timedelta(seconds=361)  # 300 s after the last full pass
    reaper._maybe_resync()
    assert metrics.RECONCILES.labels("resync")._value.get() == before + 2


# --------------------------------------------------------------------------- pure parts


def test_sandboxes_are_counted_by_ready_status_and_reason() -> None:
    ready = {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready"}]}
    down = {"conditions": [{"type": "Ready", "status": "False", "reason": "RuntimeUnavailable"}]}
    sandboxes = [
        parse_sandbox(sandbox_body(name="a", status=ready)),
        parse_sandbox(sandbox_body(name="b", status=ready)),
        parse_sandbox(sandbox_body(name="c", status=down)),
        parse_sandbox(sandbox_body(name="d")),
    ]
    assert metrics.count_by_ready(sandboxes) == {
        ("True", "Ready"): 2,
        ("False", "RuntimeUnavailable"): 1,
        ("Unknown", "Pending"): 1,
    }


def test_the_gauge_drops_to_zero_for_a_reason_no_sandbox_has_any_more() -> None:
    down = {"conditions": [{"type": "Ready", "status": "False", "reason": "PodFailed"}]}
    metrics.set_sandboxes([parse_sandbox(sandbox_body(status=down))])
    assert metrics.SANDBOXES.labels("False", "PodFailed")._value.get() == 1
    metrics.set_sandboxes([])
    assert metrics.SANDBOXES.labels("False", "PodFailed")._value.get() == 0


def test_the_sandbox_cache_keeps_only_the_activity_stamp_of_what_a_tenant_writes() -> None:
    cache = SandboxCache()
    body = sandbox_body(
        annotations={
            "kubectl.kubernetes.io/last-applied-configuration": "x" * 4000,
            "openblox.sh/last-activity": "2025-01-02T03:04:05Z",
            "openblox.sh/padding": "x" * 200_000,
        }
    )
    body["metadata"]["labels"] = {f"pad-{i}": "x" * 63 for i in range(1000)}
    body["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    sandbox = cache.upsert(body)
    assert sandbox is not None
    assert dict(sandbox.annotations) == {"openblox.sh/last-activity": "2025-01-02T03:04:05Z"}
    assert dict(sandbox.labels) == {}
    # A stamp too long to be one is not kept: no activity, so idle time runs from creation.
    padded_stamp = sandbox_body(annotations={"openblox.sh/last-activity": "2" * 100_000})
    kept = cache.upsert(padded_stamp)
    assert kept is not None and dict(kept.annotations) == {} and kept.last_activity is None


def test_a_sandbox_being_deleted_has_its_pod_deleted_and_gets_no_new_one() -> None:
    """A tenant's finalizer, or `--cascade=orphan`, holds the Sandbox back; its pod must
    not run on to its own deadline meanwhile."""
    kube, reconciler, watched, cache = _watched_operator()
    sandbox = _cached(cache)
    reconciler.reconcile(sandbox, "sandbox")
    created = kube.objects[f"/api/v1/namespaces/team-a/pods/{pod_name(sandbox)}"]
    watched.pod_seen(created)
    kube.take()
    deleting = sandbox_body(uid=_uid("demo"))
    deleting["metadata"]["deletionTimestamp"] = "2025-01-02T03:05:00Z"
    deleting["metadata"]["finalizers"] = ["tenant.example/hold"]
    cache.upsert(deleting)  # as the watch's handler does before it reconciles
    reconciler.reconcile(deleting, "sandbox")
    assert kube.take() == [("DELETE", f"/api/v1/namespaces/team-a/pods/{pod_name(sandbox)}")]
    assert reconciler._deadlines.get(("team-a", "demo")) is None
    # Once the pod is going, nothing more: no second delete, no new pod, no status.
    watched.pod_seen(
        {
            **created,
            "metadata": {**created["metadata"], "deletionTimestamp": "2025-01-02T03:05:01Z"},
        }
    )
    reconciler.reconcile(deleting, "pod")
    assert kube.take() == []


def test_a_refresh_never_brings_back_a_deleted_sandbox() -> None:
    cache = SandboxCache()
    sandbox = parse_sandbox(sandbox_body())
    cache.refresh(sandbox)
    assert len(cache) == 0
    cache.upsert(sandbox)
    cache.refresh(parse_sandbox(sandbox_body(status={"observedGeneration": 1})))
    kept = cache.get("team-a", "demo")
    assert kept is not None and kept.status == {"observedGeneration": 1}


def test_a_slim_pod_keeps_what_the_reconcile_and_the_denials_read() -> None:
    pod = {
        "metadata": {
            "name": "p",
            "namespace": "n",
            "uid": "u",
            "creationTimestamp": "2025-01-02T03:04:05Z",
            "annotations": {"openblox.sh/profile-digest": "d", "other": "x" * 100},
            "ownerReferences": [
                {"uid": "s", "controller": True, "kind": "Sandbox", "blockOwnerDeletion": True}
            ],
            "managedFields": [{"manager": "openblox"}],
        },
        "spec": {
            "nodeName": "vm",
            "activeDeadlineSeconds": 60,
            "nodeSelector": {"openblox.sh/gvisor-ready": "true"},
            "containers": [{"name": "sandbox", "image": "i", "resources": {"limits": {"a": 1}}}],
            "volumes": [{"name": "tmp"}],
        },
        "status": {"phase": "Running"},
    }
    assert slim_pod(pod) == {
        "metadata": {
            "name": "p",
            "namespace": "n",
            "uid": "u",
            "creationTimestamp": "2025-01-02T03:04:05Z",
            "labels": {},
            "annotations": {"openblox.sh/profile-digest": "d"},
            "ownerReferences": [{"kind": "Sandbox", "uid": "s", "controller": True}],
        },
        "spec": {
            "nodeName": "vm",
            "activeDeadlineSeconds": 60,
            "nodeSelector": {"openblox.sh/gvisor-ready": "true"},
            "containers": [{"name": "sandbox", "resources": {"limits": {"a": 1}}}],
        },
        "status": {"phase": "Running"},
    }


def test_a_known_absence_is_trusted_only_for_a_while() -> None:
    moment = [0.0]
    watched = Watched(clock=lambda: moment[0])
    assert watched.runtime_class_exists("kata") is None
    watched.runtime_class_gone("kata")
    assert watched.runtime_class_exists("kata") is False
    moment[0] = NEGATIVE_TTL_SECONDS + 1
    assert watched.runtime_class_exists("kata") is None
    assert watched.runtime_class_seen("kata") is True
    assert watched.runtime_class_seen("kata") is False
    assert watched.runtime_class_exists("kata") is True


def test_namespace_label_changes_are_reported() -> None:
    watched = Watched()
    assert watched.namespace_seen("a", {"x": "1"}) is True
    assert watched.namespace_seen("a", {"x": "1"}) is False
    assert watched.namespace_seen("a", {"x": "2"}) is True


def test_requeue_backs_off_and_forgets_when_settled() -> None:
    moment = [0.0]
    requeue = Requeue(clock=lambda: moment[0])
    key = ("n", "s")
    requeue.after(key, 3.0)
    assert requeue.pop_due() == []
    moment[0] = 3.0
    assert requeue.pop_due() == [key]
    requeue.after(key, 3.0)  # still waiting: 6 s this time
    moment[0] = 8.0
    assert requeue.pop_due() == []
    moment[0] = 9.0
    assert requeue.pop_due() == [key]
    for _ in range(10):
        requeue.after(key, 3.0)
        requeue.pop_due()
    requeue.after(key, 3.0)
    moment[0] += MAX_DELAY_SECONDS
    assert requeue.pop_due() == [key]
    requeue.after(key, 3.0)
    requeue.settled(key)
    assert len(requeue) == 0


def test_paths() -> None:
    assert path(plural="namespaces", name="a") == "/api/v1/namespaces/a"
    assert path(
        group="openblox.sh", version="v1alpha1", plural="sandboxes", namespace="n", name="s"
    ) + "/status" == path(
        group="openblox.sh",
        version="v1alpha1",
        plural="sandboxes",
        namespace="n",
        name="s",
        subresource="status",
    )


def test_a_namespace_being_deleted_is_not_an_error_to_retry() -> None:
    kube, reconciler, _watched, cache = _watched_operator()
    kube.errors[("POST", "/api/v1/namespaces/team-a/pods")] = 403
    sandbox = _cached(cache)
    errors = metrics.RECONCILE_ERRORS._value.get()
    original = kube._answer

    def terminating(method: str, target: str, body: Any = None) -> dict[str, Any]:
        try:
            return original(method, target, body)
        except ApiError as error:
            raise ApiError(error.status, "Forbidden", '{"reason":"NamespaceTerminating"}') from None

    kube._answer = terminating  # type: ignore[method-assign]
    reconciler.reconcile(sandbox, "sandbox")
    assert metrics.RECONCILE_ERRORS._value.get() == errors
    assert len(reconciler._requeue) == 0


def test_a_pod_whose_node_stopped_answering_is_not_probed(monkeypatch: pytest.MonkeyPatch) -> None:
    """An exec into a pod on a node that stopped answering hangs until its timeout, and
    would hold the Sandbox's next reconcile (the eviction's) back with it."""
    from openblox.controller import pod_boundaries

    probed: list[str] = []
    monkeypatch.setattr(
        pod_boundaries,
        "probe_boundary",
        lambda _kube, _ns, name, _kernel, _needs: probed.append(name),
    )
    kube, reconciler, watched, cache = _watched_operator()
    kube.objects["/api/v1/nodes/worker"] = {"status": {"nodeInfo": {"kernelVersion": "6.1.0"}}}
    sandbox = _cached(cache)
    pod = _evicted_from_a_lost_node(pod_name(sandbox), NOW)
    del pod["metadata"]["deletionTimestamp"]
    pod["status"]["conditions"] = pod["status"]["conditions"][:2]  # marked, not yet evicted
    watched.pod_seen(pod)
    watched.container_started("p1")

    reconciler.reconcile(sandbox, "pod")

    assert probed == []
    assert _ready(cache) == ("False", "NodeLost")


def test_a_probed_pod_carries_its_boundary_so_the_next_leader_does_not_probe_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from openblox.controller import pod_boundaries

    probed: list[str] = []

    def probe(_kube: Any, _namespace: str, name: str, _kernel: str, _needs: object) -> ProbeVerdict:
        probed.append(name)
        return ProbeVerdict("gvisor")

    monkeypatch.setattr(pod_boundaries, "probe_boundary", probe)
    kube, reconciler, watched, cache = _watched_operator()
    kube.objects["/api/v1/nodes/worker"] = {"status": {"nodeInfo": {"kernelVersion": "6.1.0"}}}
    sandbox = _cached(cache)
    name = pod_name(sandbox)
    pod_path = f"/api/v1/namespaces/team-a/pods/{name}"
    ready = [{"type": "Ready", "status": "True"}, {"type": "ContainersReady", "status": "True"}]
    pod: dict[str, Any] = {
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "uid": "p1",
            "ownerReferences": [{"uid": SANDBOX_UID, "controller": True}],
        },
        "spec": {"nodeName": "worker"},
        "status": {"phase": "Running", "conditions": ready},
    }
    kube.objects[pod_path] = pod
    watched.pod_seen(pod)

    reconciler.reconcile(sandbox, "pod")

    assert probed == [name]
    assert ("PATCH", pod_path) in kube.take()
    # The next leader: no memory of the probe, only the pod as its watch shows it.
    successor, successor_watched, successor_cache = _operator(kube)
    _watch_everything(successor_watched)
    successor_watched.pod_seen(
        {**pod, "metadata": {**pod["metadata"], "annotations": {"openblox.sh/boundary": "gvisor"}}}
    )
    successor.reconcile(_cached(successor_cache), "takeover")
    assert probed == [name]
    assert _ready(successor_cache) == ("True", "Ready")


def test_a_pod_stays_sealed_until_its_boundary_record_lands(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The record that unseals the pod failed once: the next reconcile writes it again
    (without probing again), and only then does the Sandbox read Ready."""
    from openblox.controller import pod_boundaries

    probed: list[str] = []

    def probe(_kube: Any, _namespace: str, name: str, _kernel: str, _needs: object) -> ProbeVerdict:
        probed.append(name)
        return ProbeVerdict("gvisor")

    monkeypatch.setattr(pod_boundaries, "probe_boundary", probe)
    kube, reconciler, watched, cache = _watched_operator()
    kube.objects["/api/v1/nodes/worker"] = {"status": {"nodeInfo": {"kernelVersion": "6.1.0"}}}
    sandbox = _cached(cache)
    name = pod_name(sandbox)
    pod_path = f"/api/v1/namespaces/team-a/pods/{name}"
    ready = [{"type": "Ready", "status": "True"}, {"type": "ContainersReady", "status": "True"}]
    pod: dict[str, Any] = {
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "uid": "p1",
            "labels": {"openblox.sh/sandbox": "demo", "openblox.sh/unverified": ""},
            "ownerReferences": [{"uid": SANDBOX_UID, "controller": True}],
        },
        "spec": {"nodeName": "worker"},
        "status": {"phase": "Running", "conditions": ready},
    }
    kube.objects[pod_path] = pod
    watched.pod_seen(pod)
    kube.errors[("PATCH", pod_path)] = 500
    with pytest.raises(ApiError):
        reconciler.reconcile(sandbox, "pod")
    assert _ready(cache) != ("True", "Ready")
    del kube.errors[("PATCH", pod_path)]
    kube.take()
    reconciler.reconcile(sandbox, "requeue")
    assert probed == [name]
    assert ("PATCH", pod_path) in kube.take()
    assert _ready(cache) == ("True", "Ready")


def test_a_pod_event_that_comes_before_the_create_answer_is_kept() -> None:
    """The pod watch can deliver the scheduler's verdict on a new pod before the answer to
    the create is stored: the older answer must not hide it. It did, once, on kind: the
    Sandbox said `PodPending` for good while its pod was Unschedulable."""
    kube, reconciler, watched, cache = _watched_operator()
    sandbox = _cached(cache)
    pods = "/api/v1/namespaces/team-a/pods"
    answer = kube.post

    def create_overtaken_by_the_watch(target: str, body: Any) -> dict[str, Any]:
        created = answer(target, body)
        created["metadata"]["resourceVersion"] = "5"
        if target == pods:
            unschedulable = {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/3 nodes are available: 1 node(s) didn't match Pod's node "
                "affinity/selector, 2 node(s) were unschedulable.",
            }
            watched.pod_seen(
                {
                    **created,
                    "metadata": {**created["metadata"], "resourceVersion": "6"},
                    "status": {"phase": "Pending", "conditions": [unschedulable]},
                }
            )
        return created

    kube.post = create_overtaken_by_the_watch  # type: ignore[method-assign]
    reconciler.reconcile(sandbox, "sandbox")
    kept = watched.pod("team-a", pod_name(sandbox))
    assert kept is not None and kept["metadata"]["resourceVersion"] == "6"
    # The event's own reconcile, which the work queue runs once the first is done.
    again = cache.get("team-a", "demo")
    assert again is not None
    reconciler.reconcile(again, "pod")
    assert _ready(cache) == ("False", "RuntimeUnavailable")


def test_an_answer_that_comes_back_after_the_pod_was_deleted_does_not_bring_it_back() -> None:
    now = [0.0]
    watched = Watched(clock=lambda: now[0])
    pod = {"metadata": {"name": "p", "namespace": "n", "uid": "u", "resourceVersion": "7"}}
    watched.pod_seen(pod)
    watched.pod_gone("n", "p", "u")
    watched.pod_seen(pod)  # say, the answer to the boundary annotation's patch
    assert watched.pod("n", "p") is None
    # A new pod of the same name is another object.
    watched.pod_seen({"metadata": {**pod["metadata"], "uid": "v", "resourceVersion": "9"}})
    assert watched.pod("n", "p") is not None


def test_deleted_pods_are_remembered_for_a_while_only() -> None:
    now = [0.0]
    watched = Watched(clock=lambda: now[0])
    watched.pod_gone("n", "a", "uid-a")
    now[0] = GONE_MEMORY_SECONDS + 1
    watched.pod_gone("n", "b", "uid-b")  # forgets uid-a as it remembers uid-b
    assert list(watched._gone) == ["uid-b"]


def test_of_two_copies_of_a_sandbox_the_cache_keeps_the_later() -> None:
    cache = SandboxCache()

    def copy(version: str, **spec: Any) -> Sandbox:
        body = sandbox_body(spec=spec or None)
        body["metadata"]["resourceVersion"] = version
        return parse_sandbox(body)

    cache.upsert(copy("10"))
    # A caller's edit comes in by the watch before our status patch's answer is stored.
    cache.upsert(copy("12", profile="code-exec", maxAgeSeconds=60))
    cache.refresh(copy("11"))
    kept = cache.get("team-a", "demo")
    assert kept is not None and kept.spec.max_age_seconds == 60
    # An event of an earlier write, delivered late, changes nothing either; the handler
    # is given the copy kept.
    assert cache.upsert(copy("9")) is kept
    # Versions that are not comparable (a server before Kubernetes 1.35 could send any
    # string) are taken in the order they come, as before.
    cache.upsert(copy("a1"))
    cache.refresh(copy("a0"))
    last = cache.get("team-a", "demo")
    assert last is not None and last.resource_version == "a0"
