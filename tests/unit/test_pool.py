"""Warm pools, the pure part: the admins' config, sizing, the pod handed out, refill pacing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from fractions import Fraction

import pytest

from openblox.builders.pod import build_pod, build_pool_pod, claim_patch, pool_pod_name
from openblox.models import parse_profile
from openblox.models.pool import MAX_POOL_SIZE, Pool, PoolError, parse_pool, parse_pools
from openblox.pool.plan import (
    PoolPod,
    RefillPacer,
    choose_pod,
    plan_pool,
    pod_footprint,
    pods_per_quota,
    pool_pod_view,
)
from openblox.timestamps import format_timestamp
from tests.unit.factories import CREATED, IMAGE_LINE, default_profile, make_sandbox

POOL = Pool("warm", "code-exec", ("team-a",), 3)
T0 = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)


def pod(name: str, *, digest: str = "d1", age: int = 0, **kwargs: object) -> PoolPod:
    return PoolPod(name=name, digest=digest, created=T0 + timedelta(seconds=age), **kwargs)  # type: ignore[arg-type]


# --- the admins' config -----------------------------------------------------------------


def test_a_pool_is_parsed_from_its_key() -> None:
    pool = parse_pool("warm", "profile: code-exec\nnamespaces: [team-a, team-b, team-a]\nsize: 5\n")
    assert pool == Pool("warm", "code-exec", ("team-a", "team-b"), 5)


@pytest.mark.parametrize(
    ("document", "words"),
    [
        ("profile: code-exec\nnamespaces: [a]\nsize: -1\n", "size must be 0 or more, not -1"),
        (
            "profile: code-exec\nnamespaces: [a]\nsize: five\n",
            "size must be a whole number of pods, not 'five'",
        ),
        (
            "profile: code-exec\nnamespaces: [a]\nsize: 2.5\n",
            "size must be a whole number of pods, not 2.5",
        ),
        (
            "profile: code-exec\nnamespaces: [a]\nsize: yes\n",
            "size must be a whole number of pods, not True",
        ),
        ("profile: code-exec\nnamespaces: [a]\n", "size must be a whole number of pods, not None"),
        (f"profile: code-exec\nnamespaces: [a]\nsize: {MAX_POOL_SIZE + 1}\n", "above the limit"),
        ("profile: code-exec\nnamespaces: []\nsize: 1\n", "namespaces must be a non-empty list"),
        (
            "profile: code-exec\nnamespaces: [Team_A]\nsize: 1\n",
            "namespaces must be a non-empty list",
        ),
        ("namespaces: [a]\nsize: 1\n", "profile must name a profile"),
        ("profile: code-exec\nnamespaces: [a]\nsize: 1\nimage: evil\n", "unknown field(s) image"),
        ("[1, 2", "not valid YAML"),
        ("- a\n", "expected a mapping"),
    ],
)
def test_a_bad_pool_is_refused_with_a_message_that_names_it(document: str, words: str) -> None:
    with pytest.raises(PoolError) as raised:
        parse_pool("warm", document)
    assert raised.value.message.startswith('pool "warm" in ConfigMap openblox-pools is refused: ')
    assert words in raised.value.message


def test_a_broken_key_hides_no_other_pool() -> None:
    good, broken = parse_pools(
        {
            "ok": "profile: code-exec\nnamespaces: [a]\nsize: 2\n",
            "bad": "profile: code-exec\nnamespaces: [a]\nsize: -3\n",
            "Not_A_Label": "profile: code-exec\nnamespaces: [a]\nsize: 1\n",
        }
    )
    assert set(good) == {"ok"} and set(broken) == {"bad", "Not_A_Label"}


# --- the pool pod and its hand-out ------------------------------------------------------


def test_a_pool_pod_has_the_cold_pods_spec_and_digest_but_no_owner_and_no_deadline() -> None:
    profile = default_profile()
    cold = build_pod(make_sandbox(), profile, now=CREATED)
    warm = build_pool_pod(POOL, "team-a", profile, "abcde")
    assert warm["metadata"]["annotations"] == cold["metadata"]["annotations"]
    assert "ownerReferences" not in warm["metadata"]
    assert warm["metadata"]["name"] == pool_pod_name(POOL, "abcde") == "warm.abcde"
    # The pod admission policy and the default-deny NetworkPolicy select this label.
    assert warm["metadata"]["labels"]["openblox.sh/sandbox"] == ""
    assert warm["metadata"]["labels"]["openblox.sh/pool"] == "warm"
    differing = {
        k
        for k in cold["spec"].keys() | warm["spec"].keys()
        if cold["spec"].get(k) != warm["spec"].get(k)
    }
    assert differing == {"activeDeadlineSeconds", "hostname"}
    assert "activeDeadlineSeconds" not in warm["spec"]


def test_a_pool_pod_requests_the_cpu_a_cold_pod_of_its_profile_requests() -> None:
    profile = parse_profile(
        "code-exec", IMAGE_LINE + "resources: {cpu: 500m, cpuRequest: 50m, memory: 512Mi}\n"
    )
    cold = build_pod(make_sandbox(), profile, now=CREATED)["spec"]["containers"][0]["resources"]
    warm = build_pool_pod(POOL, "team-a", profile, "abcde")["spec"]["containers"][0]["resources"]
    assert warm == cold
    assert warm["requests"]["cpu"] == "50m"
    assert warm["limits"]["cpu"] == "500m"


def test_the_claim_patch_is_conditional_and_ends_the_pod_with_its_sandbox() -> None:
    profile = default_profile()
    # Warm since T0; the Sandbox is made at T0 + 90 s and handed the pod 0.2 s later.
    sandbox = make_sandbox(spec={"maxAgeSeconds": 600}, created=T0 + timedelta(seconds=90))
    warm = build_pool_pod(POOL, "team-a", profile, "abcde")
    warm["metadata"].update({"name": "warm.abcde", "resourceVersion": "812"})
    warm["status"] = {"startTime": "2025-01-02T03:04:05Z"}
    patch = claim_patch(warm, sandbox, profile, T0 + timedelta(seconds=90.2))
    assert patch["metadata"]["resourceVersion"] == "812"  # the API server's precondition
    assert patch["metadata"]["labels"] == {"openblox.sh/sandbox": "demo", "openblox.sh/pool": None}
    assert (
        patch["metadata"]["ownerReferences"]
        == build_pod(sandbox, profile, now=CREATED)["metadata"]["ownerReferences"]
    )
    # The kubelet counts the deadline from the pod's start: warm time + the max age.
    assert patch["spec"] == {"activeDeadlineSeconds": 90 + 600}


def test_a_warm_pod_handed_out_late_in_a_sandboxs_life_gets_only_what_is_left() -> None:
    """Its first pod died 500 s into a 600 s life: the replacement ends at 600 s too."""
    profile = default_profile()
    sandbox = make_sandbox(spec={"maxAgeSeconds": 600}, created=T0)
    warm = build_pool_pod(POOL, "team-a", profile, "abcde")
    warm["metadata"].update({"name": "warm.abcde", "resourceVersion": "812"})
    warm["status"] = {"startTime": format_timestamp(T0 + timedelta(seconds=400))}
    patch = claim_patch(warm, sandbox, profile, T0 + timedelta(seconds=500))
    assert patch["spec"] == {"activeDeadlineSeconds": 200}
    cold = build_pod(sandbox, profile, now=T0 + timedelta(seconds=500))
    assert cold["spec"]["activeDeadlineSeconds"] == 100


def test_a_pool_pod_view_reads_readiness_digest_and_the_probe() -> None:
    warm = build_pool_pod(POOL, "team-a", default_profile(), "abcde")
    warm["metadata"].update({"name": "warm.x", "creationTimestamp": "2025-01-02T03:04:05Z"})
    warm["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    view = pool_pod_view(warm, "gvisor", "gvisor")
    assert (view.ready, view.boundary_ok, view.digest) == (True, True, default_profile().digest)
    assert pool_pod_view(warm, "none", "gvisor").boundary_ok is False
    assert pool_pod_view(warm, None, "gvisor").boundary_ok is None
    warm["status"] = {"phase": "Failed"}
    assert pool_pod_view(warm, "gvisor", "gvisor").ended


# --- choosing the pod -------------------------------------------------------------------


def test_only_a_ready_probed_current_pod_is_handed_out_the_longest_warm_first() -> None:
    pods = [
        pod("young", ready=True, boundary_ok=True, age=5),
        pod("old", ready=True, boundary_ok=True, age=1),
        pod("stale", ready=True, boundary_ok=True, digest="d0"),
        pod("unprobed", ready=True),
        pod("mismatch", ready=True, boundary_ok=False),
        pod("starting", boundary_ok=None),
        pod("going", ready=True, boundary_ok=True, terminating=True),
        pod("ended", ready=True, boundary_ok=True, ended=True),
    ]
    assert choose_pod(pods, "d1") == pods[1]
    assert choose_pod(pods, "d1", taken={"old"}) == pods[0]
    assert choose_pod(pods, "d1", taken={"old", "young"}) is None
    assert choose_pod([], "d1") is None


# --- sizing -----------------------------------------------------------------------------


def test_an_empty_pool_is_filled_within_the_allowance() -> None:
    assert plan_pool(5, [], "d1", creatable=2) == plan_pool(5, [], "d1", 2)
    plan = plan_pool(5, [], "d1", creatable=2)
    assert (plan.create, plan.delete, plan.probe) == (2, (), ())
    assert plan_pool(5, [], "d1", creatable=9).create == 5
    assert plan_pool(0, [], "d1", creatable=9).create == 0


def test_old_digest_failed_probe_and_ended_pods_go_and_are_replaced() -> None:
    pods = [
        pod("stale", ready=True, boundary_ok=True, digest="d0"),
        pod("mismatch", ready=True, boundary_ok=False),
        pod("ended", ended=True),
        pod("good", ready=True, boundary_ok=True),
        pod("going", terminating=True),
    ]
    plan = plan_pool(3, pods, "d1", creatable=9)
    assert set(plan.delete) == {"stale", "mismatch", "ended"}
    assert plan.create == 2  # 3 wanted, "good" kept; a terminating pod counts for nothing


def test_a_shrunk_pool_deletes_starting_pods_before_ready_ones_youngest_first() -> None:
    pods = [
        pod("ready-old", ready=True, boundary_ok=True, age=0),
        pod("ready-young", ready=True, boundary_ok=True, age=9),
        pod("starting-old", age=1),
        pod("starting-young", age=8),
    ]
    plan = plan_pool(2, pods, "d1", creatable=9)
    assert plan.delete == ("starting-young", "starting-old")
    assert plan.create == 0
    assert plan_pool(1, pods, "d1", creatable=9).delete == (
        "starting-young",
        "starting-old",
        "ready-young",
    )


def test_ready_unprobed_pods_are_probed_before_they_can_be_handed_out() -> None:
    plan = plan_pool(2, [pod("a", ready=True), pod("b")], "d1", creatable=0)
    assert plan.probe == ("a",)


def test_quota_holds_a_number_of_such_pods() -> None:
    warm = build_pool_pod(POOL, "team-a", default_profile(), "abcde")
    requests, limits = pod_footprint(warm, {"cpu": "5m", "memory": "32Mi"})
    assert requests["memory"] == limits["memory"] == Fraction(512 * 2**20 + 32 * 2**20)
    hard = {"requests.cpu": "2", "limits.memory": "3Gi", "pods": "10", "services": "1"}
    cpu_per_pod = requests["cpu"]
    assert pods_per_quota(hard, requests, limits) == min(
        int(2 / cpu_per_pod), (3 * 2**30) // (544 * 2**20), 10
    )
    assert pods_per_quota({"pods": "1"}, requests, limits) == 1
    assert pods_per_quota({"services": "4"}, requests, limits) is None
    assert pods_per_quota({"pods": "not-a-quantity"}, requests, limits) is None


# --- refill pacing ----------------------------------------------------------------------


def test_refill_is_a_bounded_burst_then_a_bounded_rate() -> None:
    pacer = RefillPacer(rate=2.0, burst=4, in_flight=10)
    assert pacer.allowance("ns/warm", now=0.0, starting=0) == 4
    pacer.spend("ns/warm", 4)
    assert pacer.allowance("ns/warm", now=0.0, starting=0) == 0
    assert pacer.allowance("ns/warm", now=0.5, starting=0) == 1
    assert pacer.allowance("ns/warm", now=1.0, starting=0) == 2
    assert pacer.allowance("ns/warm", now=100.0, starting=0) == 4  # never above the burst
    # Pools are paced apart.
    assert pacer.allowance("other/warm", now=0.0, starting=0) == 4


def test_refill_never_has_more_than_in_flight_pods_starting() -> None:
    pacer = RefillPacer(rate=100.0, burst=10, in_flight=3)
    assert pacer.allowance("k", now=0.0, starting=0) == 3
    assert pacer.allowance("k", now=0.0, starting=2) == 1
    assert pacer.allowance("k", now=0.0, starting=5) == 0


def test_a_forgotten_pool_starts_with_a_full_bucket() -> None:
    pacer = RefillPacer(rate=1.0, burst=2, in_flight=9)
    pacer.spend("k", 2)
    pacer.forget(["k"])
    assert pacer.allowance("k", now=0.0, starting=0) == 2


def test_refill_waits_while_claims_are_handed_out_and_pods_remain() -> None:
    pacer = RefillPacer(rate=100.0, burst=8, in_flight=8, hold_seconds=0.5)
    # A hand-out a moment ago, pods left: the burst of claims gets the cores first.
    assert pacer.allowance("k", now=10.0, starting=0, handed_out_at=9.9, ready=5) == 0
    assert pacer.allowance("k", now=10.3, starting=0, handed_out_at=10.2, ready=3) == 0
    # Never longer than the hold at a stretch, however steady the claims.
    assert pacer.allowance("k", now=10.5, starting=0, handed_out_at=10.45, ready=2) == 8
    pacer.spend("k", 8)
    assert pacer.allowance("k", now=10.6, starting=0, handed_out_at=10.55, ready=2) == 0
    assert pacer.allowance("k", now=11.1, starting=0, handed_out_at=11.05, ready=2) > 0


def test_refill_does_not_wait_for_an_empty_pool_or_a_quiet_one() -> None:
    pacer = RefillPacer(rate=100.0, burst=8, in_flight=8, hold_seconds=0.5)
    # Nothing left to hand out: claims are going cold, so refill at once.
    assert pacer.allowance("k", now=10.0, starting=0, handed_out_at=9.99, ready=0) == 8
    # The last hand-out was a while ago, or there was none.
    assert pacer.allowance("j", now=10.0, starting=0, handed_out_at=9.0, ready=4) == 8
    assert pacer.allowance("i", now=10.0, starting=0, ready=4) == 8
