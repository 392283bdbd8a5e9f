"""Warm pools on the real cluster: hand-out, races, profile edits, a killed operator,
a failed boundary probe, a tenant trying to prepare a pod, bad input, clean-up.

Every test uses a small profile of its own and a pool in its own namespace, and checks
the node has room for what it starts.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pytest

from tests.cluster.capacity import Requests, require_room
from tests.cluster.kubectl import Kube
from tests.cluster.sandboxes import (
    OPERATOR_SA,
    admission_has,
    extra_profiles,
    get_sandbox,
    opt_in,
    profile_yaml,
    ready_condition,
    sandbox,
    tenant_identity,
    wait_for,
    wait_reason,
)

pytestmark = pytest.mark.cluster

POOLS = ("configmap", "openblox-pools", "-n", "openblox-system")
CPU_M = 50
OPERATOR_LABEL = "app.kubernetes.io/name=openblox-operator"
SMALL = {"cpu": f"{CPU_M}m", "memory": "96Mi", "scratch": "16Mi"}


# --- helpers ------------------------------------------------------------------------------


def require_capacity(kube: Kube, pods: int) -> None:
    """Fail with what is missing unless the nodes can hold `pods` more small pods (their
    CPU request and the RuntimeClass's 5m overhead; memory is not what runs out first)."""
    require_room(kube, Requests(cpu_millis=CPU_M + 5), pods, f"{pods} pods of {CPU_M}m")


@contextmanager
def pools(kube: Kube, entries: dict[str, str]) -> Iterator[None]:
    set_pools(kube, entries)
    try:
        yield
    finally:
        set_pools(kube, dict.fromkeys(entries))


def set_pools(kube: Kube, entries: Mapping[str, str | None]) -> None:
    kube.kubectl("patch", *POOLS, "--type=merge", "-p", json.dumps({"data": entries}))


def pool_entry(profile: str, namespace: str, size: int | str) -> str:
    return f"profile: {profile}\nnamespaces: [{namespace}]\nsize: {size}\n"


def pods_of_pool(kube: Kube, namespace: str, pool: str) -> list[dict[str, Any]]:
    out = kube.kubectl(
        "get", "pods", "-n", namespace, "-l", f"openblox.sh/pool={pool}", "-o", "json"
    )
    items: list[dict[str, Any]] = json.loads(out.stdout)["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def is_warm(pod: dict[str, Any]) -> bool:
    """Ready, and the operator's boundary probe has seen gVisor in it."""
    ready = any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in pod.get("status", {}).get("conditions", [])
    )
    return ready and pod["metadata"].get("annotations", {}).get("openblox.sh/boundary") == "gvisor"


def wait_warm(kube: Kube, namespace: str, pool: str, count: int, timeout: float = 180) -> list[Any]:
    def warm() -> list[dict[str, Any]] | None:
        found = [p for p in pods_of_pool(kube, namespace, pool) if is_warm(p)]
        return found if len(found) >= count else None

    result: list[Any] = wait_for(f"{count} warm pods in pool {pool}", warm, timeout, every=1)
    return result


def all_pods(kube: Kube, namespace: str) -> list[dict[str, Any]]:
    out = kube.kubectl("get", "pods", "-n", namespace, "-o", "json")
    items: list[dict[str, Any]] = json.loads(out.stdout)["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def owners(pod: dict[str, Any]) -> list[str]:
    return [r["uid"] for r in pod["metadata"].get("ownerReferences", []) if r.get("controller")]


def pool_events(kube: Kube, reason: str) -> list[str]:
    out = kube.kubectl(
        "get",
        "events",
        "-n",
        "openblox-system",
        "--field-selector",
        f"involvedObject.name=openblox-pools,reason={reason}",
        "-o",
        "json",
    )
    return [e["message"] for e in json.loads(out.stdout)["items"]]


def apply_many(kube: Kube, names: list[str], namespace: str, profile: str) -> None:
    """All at once, in one request stream, so their reconciles race."""
    items = [sandbox(n, namespace, profile=profile) for n in names]
    kube.apply({"apiVersion": "v1", "kind": "List", "items": items})


@pytest.fixture
def pool_ns(operator: Kube, namespace: str) -> str:
    opt_in(operator, namespace)
    return namespace


@pytest.fixture
def small_profile(operator: Kube) -> Iterator[str]:
    name = f"pool-{secrets.token_hex(3)}"
    with extra_profiles(operator, {name: profile_yaml(resources=SMALL)}):
        wait_for("admission params", lambda: admission_has(operator, name), 30)
        yield name


# --- the warm path ------------------------------------------------------------------------


def test_a_sandbox_gets_a_warm_pod_and_the_pool_refills(
    operator: Kube, pool_ns: str, small_profile: str
) -> None:
    require_capacity(operator, 3)
    pool = f"warm-{secrets.token_hex(2)}"
    with pools(operator, {pool: pool_entry(small_profile, pool_ns, 2)}):
        warm = wait_warm(operator, pool_ns, pool, 2)
        warm_names = {p["metadata"]["name"] for p in warm}
        operator.apply(sandbox("quick", pool_ns, profile=small_profile, maxAgeSeconds=600))
        body = wait_reason(operator, "quick", pool_ns, "Ready", 30)
        name = body["status"]["podName"]
        assert name in warm_names and name.startswith(f"{pool}.")
        pod = operator.get("pod", name, pool_ns)
        assert owners(pod) == [body["metadata"]["uid"]]
        assert pod["metadata"]["labels"]["openblox.sh/sandbox"] == "quick"
        assert "openblox.sh/pool" not in pod["metadata"]["labels"]
        assert (
            body["status"]["profileDigest"]
            == pod["metadata"]["annotations"]["openblox.sh/profile-digest"]
        )
        # The lifetime starts at the hand-out: the deadline is the warm time plus max age.
        assert pod["spec"]["activeDeadlineSeconds"] >= 600
        # The caller's tools follow status.podName (a tenant's plain kubectl exec too).
        result = operator.exec(name, pool_ns, "python3", "-c", "print(6*7)")
        assert result.stdout.strip() == "42", result.stderr
        # A warm pod is as hardened as a cold one: until the NRI plugin took pool pods too,
        # a program copied into a handed-out pod's /tmp ran, and /dev/shm had no bound.
        hardened = operator.exec(
            name,
            pool_ns,
            "/bin/sh",
            "-c",
            "cp /bin/true /tmp/t; /tmp/t && echo ran; grep ' /dev/shm ' /proc/self/mountinfo",
        )
        assert "ran" not in hardened.stdout, hardened.stdout
        assert "noexec" in hardened.stdout and "size=" in hardened.stdout, hardened.stdout
        wait_warm(operator, pool_ns, pool, 2)  # refilled
        operator.kubectl("delete", "sandbox", "quick", "-n", pool_ns)
        wait_for(
            "the handed-out pod to go with its Sandbox",
            lambda: name not in {p["metadata"]["name"] for p in all_pods(operator, pool_ns)},
            60,
        )
        assert name not in {p["metadata"]["name"] for p in pods_of_pool(operator, pool_ns, pool)}


def test_a_sandbox_on_an_empty_pool_becomes_ready_cold(
    operator: Kube, pool_ns: str, small_profile: str
) -> None:
    require_capacity(operator, 1)
    pool = f"empty-{secrets.token_hex(2)}"
    with pools(operator, {pool: pool_entry(small_profile, pool_ns, 0)}):
        operator.apply(sandbox("cold", pool_ns, profile=small_profile))
        body = wait_reason(operator, "cold", pool_ns, "Ready", 120)
        assert body["status"]["podName"] == "cold"
        assert body["status"]["boundary"] == "gvisor"
        assert pods_of_pool(operator, pool_ns, pool) == []


def test_the_race_for_the_last_pod_hands_it_to_one_sandbox(
    operator: Kube, pool_ns: str, small_profile: str
) -> None:
    require_capacity(operator, 5)
    pool = f"last-{secrets.token_hex(2)}"
    with pools(operator, {pool: pool_entry(small_profile, pool_ns, 1)}):
        (last,) = wait_warm(operator, pool_ns, pool, 1)
        names = [f"racer-{i}" for i in range(4)]
        apply_many(operator, names, pool_ns, small_profile)
        bodies = [wait_reason(operator, n, pool_ns, "Ready", 180) for n in names]
        pod_names = [b["status"]["podName"] for b in bodies]
        assert len(set(pod_names)) == len(names), pod_names
        assert pod_names.count(last["metadata"]["name"]) == 1
        by_name = {p["metadata"]["name"]: p for p in all_pods(operator, pool_ns)}
        for body in bodies:
            pod = by_name[body["status"]["podName"]]
            assert owners(pod) == [body["metadata"]["uid"]]
        uids = {b["metadata"]["uid"] for b in bodies}
        owned = [p for p in by_name.values() if set(owners(p)) & uids]
        assert len(owned) == len(names)  # one pod each, none shared, none extra


def test_a_profile_edited_while_pods_are_warm_replaces_them(
    operator: Kube, pool_ns: str, small_profile: str
) -> None:
    require_capacity(operator, 4)
    pool = f"edit-{secrets.token_hex(2)}"
    with pools(operator, {pool: pool_entry(small_profile, pool_ns, 2)}):
        before = {p["metadata"]["uid"] for p in wait_warm(operator, pool_ns, pool, 2)}
        edited = {"data": {small_profile: profile_yaml(resources={**SMALL, "memory": "112Mi"})}}
        operator.kubectl(
            "patch", "configmap", "openblox-profiles", "-n", "openblox-system",
            "--type=merge", "-p", json.dumps(edited),
        )  # fmt: skip

        def replaced() -> list[dict[str, Any]] | None:
            pods = pods_of_pool(operator, pool_ns, pool)
            fresh = [p for p in pods if p["metadata"]["uid"] not in before and is_warm(p)]
            return fresh if len(fresh) >= 2 and len(pods) == len(fresh) else None

        fresh = wait_for("the pool to be rebuilt from the new profile", replaced, 180, every=1)
        memory = fresh[0]["spec"]["containers"][0]["resources"]["limits"]["memory"]
        assert memory == "112Mi"
        operator.apply(sandbox("after-edit", pool_ns, profile=small_profile))
        body = wait_reason(operator, "after-edit", pool_ns, "Ready", 60)
        pod = operator.get("pod", body["status"]["podName"], pool_ns)
        assert pod["metadata"]["uid"] not in before
        assert pod["spec"]["containers"][0]["resources"]["limits"]["memory"] == "112Mi"


def test_the_operator_killed_mid_hand_out_loses_no_pod_and_shares_none(
    operator: Kube, pool_ns: str, small_profile: str
) -> None:
    require_capacity(operator, 7)
    pool = f"kill-{secrets.token_hex(2)}"
    with pools(operator, {pool: pool_entry(small_profile, pool_ns, 3)}):
        wait_warm(operator, pool_ns, pool, 3)
        names = [f"survivor-{i}" for i in range(3)]
        apply_many(operator, names, pool_ns, small_profile)
        operator.kubectl(
            "delete", "pod", "-n", "openblox-system", "-l", OPERATOR_LABEL,
            "--grace-period=0", "--force", "--wait=false",
        )  # fmt: skip
        bodies = [wait_reason(operator, n, pool_ns, "Ready", 240) for n in names]
        time.sleep(3)  # a second pod for one Sandbox would be deleted by now; none must be
        uids = {b["metadata"]["uid"] for b in bodies}
        by_name = {p["metadata"]["name"]: p for p in all_pods(operator, pool_ns)}
        for body in bodies:
            owned = [p for p in by_name.values() if owners(p) == [body["metadata"]["uid"]]]
            assert [p["metadata"]["name"] for p in owned] == [body["status"]["podName"]]
        assert all(len(set(owners(p)) & uids) <= 1 for p in by_name.values())
        assert len({b["status"]["podName"] for b in bodies}) == len(names)


def test_a_hand_out_landing_late_never_costs_the_sandbox_both_its_pods(
    operator: Kube, pool_ns: str, small_profile: str
) -> None:
    """A replaced operator's hand-out can land after the next operator gave the Sandbox a
    cold pod and that pod started going: the Sandbox then holds two pods, and its status
    names the one being deleted. The live one must stay (CI once saw both deleted).

    A finalizer holds the cold pod Terminating so the moment lasts; it and the late
    hand-out are written as the operator's service account (only it may write a sandbox
    pod), as the replaced operator would have.
    """
    require_capacity(operator, 3)
    pool = f"late-{secrets.token_hex(2)}"
    operator.apply(sandbox("late", pool_ns, profile=small_profile))  # no pool yet: cold
    first = wait_reason(operator, "late", pool_ns, "Ready", 120)
    assert first["status"]["podName"] == "late"
    hold = {"metadata": {"finalizers": ["openblox.test/hold"]}}
    operator.kubectl(
        "patch", "pod", "late", "-n", pool_ns, "--type=merge",
        "-p", json.dumps(hold), f"--as={OPERATOR_SA}",
    )  # fmt: skip
    try:
        with pools(operator, {pool: pool_entry(small_profile, pool_ns, 1)}):
            (warm,) = wait_warm(operator, pool_ns, pool, 1)
            name, uid = warm["metadata"]["name"], warm["metadata"]["uid"]
            operator.kubectl(
                "delete", "pod", "late", "-n", pool_ns, "--wait=false", f"--as={OPERATOR_SA}"
            )
            owner = {
                "apiVersion": "openblox.sh/v1alpha1",
                "kind": "Sandbox",
                "name": "late",
                "uid": first["metadata"]["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
            hand_out = {
                "metadata": {
                    "labels": {"openblox.sh/sandbox": "late", "openblox.sh/pool": None},
                    "ownerReferences": [owner],
                }
            }
            operator.kubectl(
                "patch", "pod", name, "-n", pool_ns, "--type=merge",
                "-p", json.dumps(hand_out), f"--as={OPERATOR_SA}",
            )  # fmt: skip

            def ready_in_the_late_pod() -> dict[str, Any] | None:
                body = get_sandbox(operator, "late", pool_ns) or {}
                named = (body.get("status") or {}).get("podName")
                return (
                    body
                    if named == name and ready_condition(body).get("status") == "True"
                    else None
                )

            wait_for("the Sandbox to be Ready in the live pod", ready_in_the_late_pod, 60)
            time.sleep(3)  # a deletion of the live pod would have been sent by now
            pod = operator.get("pod", name, pool_ns)
            assert pod["metadata"]["uid"] == uid
            assert not pod["metadata"].get("deletionTimestamp"), "the live pod is being deleted"
            owned = [p for p in all_pods(operator, pool_ns) if owners(p) == [owner["uid"]]]
            assert [p["metadata"]["name"] for p in owned] == [name]  # no third pod
    finally:
        operator.kubectl(
            "patch", "pod", "late", "-n", pool_ns, "--type=json",
            "-p", '[{"op": "remove", "path": "/metadata/finalizers"}]', f"--as={OPERATOR_SA}",
            check=False,
        )  # fmt: skip


def test_a_pool_pod_whose_boundary_check_fails_is_never_handed_out(
    operator: Kube, pool_ns: str, small_profile: str
) -> None:
    """A pool pod that runs under runc, not gVisor, is only told apart by its probe.

    A ResourceQuota holds one gVisor pool pod and one runc pod (no RuntimeClass overhead,
    so 5m less) but not two gVisor pods, so once the real warm pod is handed out the
    keeper cannot refill, and the runc pod is the only pod in the pool while a second
    Sandbox waits for one.
    """
    require_capacity(operator, 3)
    operator.apply(
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "one-real-one-runc", "namespace": pool_ns},
            "spec": {"hard": {"requests.cpu": f"{2 * CPU_M + 5}m"}},
        }
    )
    pool = f"probe-{secrets.token_hex(2)}"
    forged_name = f"{pool}.runc"
    with pools(operator, {pool: pool_entry(small_profile, pool_ns, 1)}):
        (warm,) = wait_warm(operator, pool_ns, pool, 1)
        operator.apply(sandbox("takes-real", pool_ns, profile=small_profile))
        taker = wait_reason(operator, "takes-real", pool_ns, "Ready", 60)
        assert taker["status"]["podName"] == warm["metadata"]["name"]
        # The same pool pod but under runc, made as the operator (only it may make
        # sandbox pods): what a broken node or a wrong RuntimeClass would give.
        dropped = ("runtimeClassName", "overhead", "nodeName")
        forged = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": forged_name,
                "namespace": pool_ns,
                "labels": warm["metadata"]["labels"],
                "annotations": {
                    "openblox.sh/profile-digest": warm["metadata"]["annotations"][
                        "openblox.sh/profile-digest"
                    ]
                },
            },
            "spec": {k: v for k, v in warm["spec"].items() if k not in dropped},
        }
        operator.apply(forged, f"--as={OPERATOR_SA}")
        operator.apply(sandbox("never-runc", pool_ns, profile=small_profile))
        wait_for(
            "the runc pool pod to be refused and deleted",
            lambda: forged_name not in {p["metadata"]["name"] for p in all_pods(operator, pool_ns)},
            90,
        )
        assert any(forged_name in m for m in pool_events(operator, "PoolPodFailed"))
        body = get_sandbox(operator, "never-runc", pool_ns) or {}
        assert (body.get("status") or {}).get("podName") != forged_name
        operator.kubectl("delete", "sandbox", "takes-real", "-n", pool_ns)  # makes room
        body = wait_reason(operator, "never-runc", pool_ns, "Ready", 180)
        assert body["status"]["podName"] != forged_name
        assert body["status"]["boundary"] == "gvisor"


def test_a_tenant_cannot_prepare_a_pool_pod_before_it_is_handed_out(
    operator: Kube, pool_ns: str, small_profile: str
) -> None:
    require_capacity(operator, 2)
    tenant = tenant_identity(operator, pool_ns)
    pool = f"seal-{secrets.token_hex(2)}"
    with pools(operator, {pool: pool_entry(small_profile, pool_ns, 1)}):
        (warm,) = wait_warm(operator, pool_ns, pool, 1)
        name = warm["metadata"]["name"]
        plant = ("sh", "-c", "echo planted > /workspace/planted; sleep 600 &")
        for who in (tenant, "cluster-admin"):
            as_who = [f"--as={tenant}"] if who == tenant else []
            refused = operator.kubectl(
                "exec", *as_who, "-n", pool_ns, name, "-c", "sandbox", "--", *plant, check=False
            )
            assert refused.returncode != 0
            assert "not yet handed to a Sandbox" in refused.stderr, refused.stderr
        attach = operator.kubectl(
            "attach", "-n", pool_ns, name, "-c", "sandbox", check=False, timeout=30
        )
        assert "not yet handed to a Sandbox" in attach.stderr, attach.stderr
        relabel = operator.kubectl(
            "label", f"--as={tenant}", "pod", name, "-n", pool_ns, "openblox.sh/pool-", check=False
        )
        assert relabel.returncode != 0
        # Once handed out, the same tenant may exec, and finds nothing planted.
        operator.apply(sandbox("mine", pool_ns, profile=small_profile))
        body = wait_reason(operator, "mine", pool_ns, "Ready", 60)
        assert body["status"]["podName"] == name
        found = operator.kubectl(
            "exec", f"--as={tenant}", "-n", pool_ns, name, "-c", "sandbox", "--",
            "ls", "-A", "/workspace",
        )  # fmt: skip
        assert "planted" not in found.stdout


# --- bad input and clean-up ------------------------------------------------------------------


def test_bad_pool_sizes_and_unknown_profiles_are_refused_and_nothing_running_is_lost(
    operator: Kube, pool_ns: str, small_profile: str
) -> None:
    require_capacity(operator, 3)
    pool = f"good-{secrets.token_hex(2)}"
    tag = secrets.token_hex(2)
    with pools(operator, {pool: pool_entry(small_profile, pool_ns, 1)}):
        (warm,) = wait_warm(operator, pool_ns, pool, 1)
        operator.apply(sandbox("running", pool_ns, profile=small_profile))
        wait_reason(operator, "running", pool_ns, "Ready", 60)
        (kept,) = wait_warm(operator, pool_ns, pool, 1)
        bad = {
            f"neg-{tag}": pool_entry(small_profile, pool_ns, -1),
            f"nan-{tag}": pool_entry(small_profile, pool_ns, "five"),
            f"ghost-{tag}": pool_entry(f"no-such-{tag}", pool_ns, 1),
        }
        with pools(operator, bad):
            # The good pool's key broken too: its last good version stays in service.
            set_pools(operator, {pool: pool_entry(small_profile, pool_ns, "-3")})
            wait_for(
                "PoolRefused events",
                lambda: (
                    {f"neg-{tag}", f"nan-{tag}", pool}
                    <= {m.split('"')[1] for m in pool_events(operator, "PoolRefused")}
                ),
                30,
            )
            messages = pool_events(operator, "PoolRefused")
            assert any(
                f'"neg-{tag}"' in m and "size must be 0 or more, not -1" in m for m in messages
            )
            assert any(
                f'"nan-{tag}"' in m and "whole number of pods, not 'five'" in m for m in messages
            )
            assert any(f'"{pool}"' in m and "last good version stays" in m for m in messages)
            wait_for(
                "PoolProfileNotFound",
                lambda: any(
                    f"no-such-{tag}" in m for m in pool_events(operator, "PoolProfileNotFound")
                ),
                30,
            )
            time.sleep(3)
            assert [p["metadata"]["uid"] for p in pods_of_pool(operator, pool_ns, pool)] == [
                kept["metadata"]["uid"]
            ]
            assert (
                ready_condition(get_sandbox(operator, "running", pool_ns) or {})["status"] == "True"
            )
        assert warm["metadata"]["uid"] != kept["metadata"]["uid"]


def test_a_pool_larger_than_the_quota_allows_is_capped_with_an_event(
    operator: Kube, pool_ns: str, small_profile: str
) -> None:
    require_capacity(operator, 3)
    operator.apply(
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "small", "namespace": pool_ns},
            "spec": {"hard": {"pods": "3"}},
        }
    )
    # A Sandbox already running there takes one of the quota's three pods.
    operator.apply(sandbox("running", pool_ns, profile=small_profile))
    wait_reason(operator, "running", pool_ns, "Ready", 120)
    running_uid = operator.get("pod", "running", pool_ns)["metadata"]["uid"]
    pool = f"quota-{secrets.token_hex(2)}"
    with pools(operator, {pool: pool_entry(small_profile, pool_ns, 50)}):
        wait_for(
            "PoolExceedsQuota",
            lambda: any(
                f'"{pool}"' in m and "holds at most 3" in m
                for m in pool_events(operator, "PoolExceedsQuota")
            ),
            30,
        )
        wait_warm(operator, pool_ns, pool, 2)
        # The API server's quota is the last word: the third pool pod is refused, visibly.
        wait_for(
            "PoolExceedsQuota from the refused create",
            lambda: any(
                f'"{pool}" cannot add a pod' in m and "exceeded quota" in m
                for m in pool_events(operator, "PoolExceedsQuota")
            ),
            30,
        )
        time.sleep(3)
        assert len(pods_of_pool(operator, pool_ns, pool)) == 2
        assert operator.get("pod", "running", pool_ns)["metadata"]["uid"] == running_uid
        assert ready_condition(get_sandbox(operator, "running", pool_ns) or {})["status"] == "True"
        # A Sandbox still gets a warm pod: a hand-out creates no pod, so the full quota
        # does not stand in its way.
        operator.apply(sandbox("claims", pool_ns, profile=small_profile))
        body = wait_reason(operator, "claims", pool_ns, "Ready", 60)
        assert body["status"]["podName"].startswith(f"{pool}.")


def test_pool_pods_go_when_the_namespace_opts_out(
    operator: Kube, pool_ns: str, small_profile: str
) -> None:
    require_capacity(operator, 2)
    pool = f"optout-{secrets.token_hex(2)}"
    with pools(operator, {pool: pool_entry(small_profile, pool_ns, 2)}):
        wait_warm(operator, pool_ns, pool, 2)
        operator.kubectl("label", "namespace", pool_ns, "openblox.sh/sandboxes-")
        wait_for("the pool pods to go", lambda: not pods_of_pool(operator, pool_ns, pool), 60)
        assert any(f'"{pool}"' in m for m in pool_events(operator, "PoolRefused"))
