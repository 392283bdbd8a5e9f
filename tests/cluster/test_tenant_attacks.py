"""A tenant against the operator: what one caller with only the `openblox-client` role
can do to its own Sandboxes must never stop the reaper for everyone, keep a pod running
past its Sandbox's max age, or put a process of its own in a pod before the operator has
verified the pod's boundary.

Each attack is made as the tenant (`kubectl --as`), and checked as the cluster sees it.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from openblox.timestamps import parse_timestamp
from tests.cluster.capacity import require_sandbox_room
from tests.cluster.kubectl import Kube
from tests.cluster.sandboxes import (
    admission_has,
    extra_profiles,
    get_sandbox,
    opt_in,
    opted_in_namespace,
    pod_of,
    profile_yaml,
    sandbox,
    tenant_identity,
    wait_for,
    wait_reason,
)

pytestmark = pytest.mark.cluster

# Valid RFC 3339, but at +01:00 the first moment of year 1 lies before anything a UTC
# datetime can hold: formatting the reaper's record of it overflowed mid-pass.
EDGE_OF_THE_CALENDAR = "0001-01-01T00:00:00+01:00"
# How late past its deadline the reaper may delete a Sandbox: one pass (1 s), the
# delete and its watch event, on a busy two-core node.
REAP_SLACK_SECONDS = 10
SMALL = {"cpu": "100m", "cpuRequest": "10m", "memory": "96Mi", "scratch": "16Mi"}


@pytest.fixture
def tenant_ns(operator: Kube, namespace: str) -> tuple[str, str]:
    opt_in(operator, namespace)
    return namespace, tenant_identity(operator, namespace)


@pytest.fixture
def small_profile(operator: Kube) -> Iterator[str]:
    name = f"lt-{secrets.token_hex(3)}"
    with extra_profiles(operator, {name: profile_yaml(resources=SMALL)}):
        wait_for("admission params", lambda: admission_has(operator, name), 30)
        yield name


def _as(tenant: str) -> str:
    return f"--as={tenant}"


def _created(body: dict[str, Any]) -> datetime:
    return parse_timestamp(body["metadata"]["creationTimestamp"])


def _live_pods(kube: Kube, namespace: str, owner_uid: str) -> list[dict[str, Any]]:
    out = kube.kubectl("get", "pods", "-n", namespace, "-l", "openblox.sh/sandbox", "-o", "json")
    return [
        pod
        for pod in json.loads(out.stdout)["items"]
        if any(ref.get("uid") == owner_uid for ref in pod["metadata"].get("ownerReferences") or [])
        and not pod["metadata"].get("deletionTimestamp")
        and pod["status"].get("phase") in ("Pending", "Running")
    ]


def _wait_gone_by(kube: Kube, name: str, namespace: str, deadline: datetime) -> None:
    """The Sandbox is gone no later than `deadline` plus the reaper's slack."""
    limit = deadline + timedelta(seconds=REAP_SLACK_SECONDS)
    while get_sandbox(kube, name, namespace) is not None:
        now = datetime.now(UTC)
        assert now < limit, (
            f"Sandbox {namespace}/{name} outlived its deadline {deadline:%H:%M:%S} by "
            f"{(now - deadline).total_seconds():.0f} s"
        )
        time.sleep(0.5)


def _padded(name: str, namespace: str, labels: int, **spec: Any) -> dict[str, Any]:
    # No pod is ever made for it (Kata refuses to run without confirmed NetworkPolicy
    # enforcement here), so bisecting its size costs the node nothing; its deadline is
    # armed all the same.
    body = sandbox(name, namespace, profile="code-exec-kata", **spec)
    body["metadata"]["labels"] = {f"pad-{i:05d}": "x" * 63 for i in range(labels)}
    return body


def _create_padded_to_the_limit(
    kube: Kube, namespace: str, tenant: str, name: str, **spec: Any
) -> int:
    """As the tenant, the Sandbox with the most labels etcd still stores (labels have no
    total size limit short of etcd's request size): nothing more fits beside it, so the
    operator cannot write its status. Returns the label count."""
    fits, too_many = 0, 40_000
    while too_many - fits > 1:
        count = (fits + too_many) // 2
        made = kube.kubectl(
            "create", "-f", "-", _as(tenant),
            stdin=json.dumps(_padded(name, namespace, count, **spec)), check=False,
        )  # fmt: skip
        if made.returncode == 0:
            fits = count
            kube.kubectl("delete", "sandbox", name, "-n", namespace, "--wait=true", timeout=60)
        else:
            # etcd's own limit ("request is too large"), or the API server's client of it
            # ("larger than max") for a body far over it.
            assert re.search("too large|larger than max", made.stderr), made.stderr[-500:]
            too_many = count
    assert fits > 1000, f"only {fits} labels fit"
    kube.kubectl(
        "create", "-f", "-", _as(tenant), stdin=json.dumps(_padded(name, namespace, fits, **spec))
    )
    return fits


def test_one_tenants_poisoned_sandboxes_never_stop_the_reaper_for_others(
    operator: Kube, tenant_ns: tuple[str, str], small_profile: str
) -> None:
    """Every Sandbox below comes due at the same second, so one pass takes them together:
    a stamp at the edge of the calendar and a body padded to etcd's size limit (its
    Expired status cannot be written) cost those two, never the others in the pass."""
    namespace, tenant = tenant_ns
    require_sandbox_room(operator, small_profile, 2)
    idle = 60
    _create_padded_to_the_limit(operator, namespace, tenant, "padded", idleTimeoutSeconds=idle)
    poisoned = sandbox("poisoned", namespace, profile="code-exec-kata", idleTimeoutSeconds=idle)
    poisoned["metadata"]["annotations"] = {"openblox.sh/last-activity": EDGE_OF_THE_CALENDAR}
    operator.apply(poisoned, _as(tenant))
    deadline = _created(operator.get("sandbox", "padded", namespace)) + timedelta(seconds=idle)
    with opted_in_namespace(operator, "lt-other") as other:
        victims = ("victim-a", "victim-b")
        for name in victims:
            operator.apply(sandbox(name, other, profile=small_profile, idleTimeoutSeconds=idle))
        # Each comes due at the padded one's second: the poisoned one by its own idle
        # timeout, the victims by theirs, shortened (a spec may only shorten) to match.
        for name, where in (("poisoned", namespace), *((v, other) for v in victims)):
            created = _created(operator.get("sandbox", name, where))
            seconds = int((deadline - created).total_seconds())
            assert 20 <= seconds <= idle, f"{name} was made too late for this test: {seconds}s"
            patch = json.dumps({"spec": {"idleTimeoutSeconds": seconds}})
            as_tenant = [_as(tenant)] if where == namespace else []
            operator.kubectl(
                "patch", "sandbox", name, "-n", where, *as_tenant, "--type=merge", "-p", patch
            )
        for name in victims:
            wait_reason(operator, name, other, "Ready", 120)
        for name in victims:
            _wait_gone_by(operator, name, other, deadline)
    _wait_gone_by(operator, "poisoned", namespace, deadline)
    _wait_gone_by(operator, "padded", namespace, deadline)


def _hold_and_replace_late(
    kube: Kube, namespace: str, tenant: str, profile: str, max_age: int
) -> tuple[dict[str, Any], datetime]:
    """A Sandbox the tenant holds with a finalizer of its own, whose first pod the guest
    ends (it kills its own init) two thirds into its life, so a replacement pod starts
    late. Returns the replacement pod and the Sandbox's max-age deadline."""
    held = sandbox("held", namespace, profile=profile, maxAgeSeconds=max_age)
    held["metadata"]["finalizers"] = ["tenant.example/hold"]
    kube.apply(held, _as(tenant))
    body = wait_reason(kube, "held", namespace, "Ready", 120)
    deadline = _created(body) + timedelta(seconds=max_age)
    first = kube.get("pod", pod_of(kube, "held", namespace), namespace)
    kill_at = deadline - timedelta(seconds=max_age / 3)
    time.sleep(max(0.0, (kill_at - datetime.now(UTC)).total_seconds()))
    kube.kubectl(
        "exec", _as(tenant), "-n", namespace, first["metadata"]["name"], "-c", "sandbox", "--",
        "sh", "-c", "kill -9 1", check=False,
    )  # fmt: skip

    def replaced() -> dict[str, Any] | None:
        pods = _live_pods(kube, namespace, body["metadata"]["uid"])
        fresh = [p for p in pods if p["metadata"]["uid"] != first["metadata"]["uid"]]
        return fresh[0] if fresh else None

    replacement: dict[str, Any] = wait_for("a replacement pod", replaced, 60)
    return replacement, deadline


def test_a_pod_replaced_late_ends_with_its_sandbox_however_the_tenant_holds_it(
    operator: Kube, tenant_ns: tuple[str, str], small_profile: str
) -> None:
    namespace, tenant = tenant_ns
    require_sandbox_room(operator, small_profile, 2)
    max_age = 60
    try:
        replacement, deadline = _hold_and_replace_late(
            operator, namespace, tenant, small_profile, max_age
        )
        # Its own deadline ends it with the Sandbox even if the operator were down.
        started = datetime.now(UTC)
        assert (
            replacement["spec"]["activeDeadlineSeconds"] <= (deadline - started).total_seconds() + 5
        ), replacement["spec"]
        uid = operator.get("sandbox", "held", namespace)["metadata"]["uid"]
        # Past max age the reaper deletes the Sandbox; the tenant's finalizer holds the
        # object, but no pod of it may run on, or take a command.
        end = deadline + timedelta(seconds=REAP_SLACK_SECONDS)
        time.sleep(max(0.0, (end - datetime.now(UTC)).total_seconds()))
        body = get_sandbox(operator, "held", namespace)
        assert body is not None and body["metadata"].get("deletionTimestamp"), body
        assert _live_pods(operator, namespace, uid) == []
        answered = operator.kubectl(
            "exec", _as(tenant), "-n", namespace, replacement["metadata"]["name"],
            "-c", "sandbox", "--", "true", check=False,
        )  # fmt: skip
        assert answered.returncode != 0, "a pod of an expired Sandbox still takes commands"
    finally:
        operator.kubectl(
            "patch", "sandbox", "held", "-n", namespace, "--type=merge",
            "-p", '{"metadata":{"finalizers":null}}', check=False,
        )  # fmt: skip


def test_deleting_with_cascade_orphan_ends_the_pod_and_the_sandbox(
    operator: Kube, tenant_ns: tuple[str, str], small_profile: str
) -> None:
    """`--cascade=orphan` needs only the delete right the client role grants. The
    garbage collector may not strip a sandbox pod's owner (admission lets it only
    delete), so the operator ends the pod, and then the Sandbox goes."""
    namespace, tenant = tenant_ns
    require_sandbox_room(operator, small_profile)
    operator.apply(sandbox("orphan", namespace, profile=small_profile), _as(tenant))
    body = wait_reason(operator, "orphan", namespace, "Ready", 120)
    uid = body["metadata"]["uid"]
    operator.kubectl(
        "delete", "sandbox", "orphan", "-n", namespace, _as(tenant),
        "--cascade=orphan", "--wait=false",
    )  # fmt: skip
    wait_for("its pod ended", lambda: _live_pods(operator, namespace, uid) == [], 30)
    wait_for("the Sandbox gone", lambda: get_sandbox(operator, "orphan", namespace) is None, 60)
    left = operator.kubectl(
        "get", "pods", "-n", namespace, "-l", "openblox.sh/sandbox", "-o", "name"
    ).stdout.split()
    assert left == [] or all(
        operator.get("pod", name.split("/", 1)[1], namespace)["metadata"].get("deletionTimestamp")
        for name in left
    ), f"an orphaned sandbox pod runs on: {left}"


def test_a_namespace_that_stops_opting_in_does_not_stop_the_clock(
    operator: Kube, tenant_ns: tuple[str, str], small_profile: str
) -> None:
    namespace, tenant = tenant_ns
    require_sandbox_room(operator, small_profile)
    idle = 25
    operator.apply(
        sandbox("clock", namespace, profile=small_profile, idleTimeoutSeconds=idle), _as(tenant)
    )
    body = wait_reason(operator, "clock", namespace, "Ready", 120)
    operator.kubectl("label", "namespace", namespace, "openblox.sh/sandboxes-")
    wait_for(
        "the Sandbox to say its profile is not allowed here",
        lambda: (
            (get_sandbox(operator, "clock", namespace) or {}).get("status", {}).get("expiresAt")
            and wait_reason(operator, "clock", namespace, "ProfileNotAllowed", 30)
        ),
        40,
    )
    _wait_gone_by(operator, "clock", namespace, _created(body) + timedelta(seconds=idle))


def test_a_profile_shortened_since_holds_its_sandboxes_to_the_new_bound(
    operator: Kube, tenant_ns: tuple[str, str]
) -> None:
    namespace, tenant = tenant_ns
    name = f"lt-short-{secrets.token_hex(3)}"
    long_lived = profile_yaml(resources=SMALL, lifetime={"maxAgeSeconds": 3600})
    with extra_profiles(operator, {name: long_lived}):
        wait_for("admission params", lambda: admission_has(operator, name), 30)
        require_sandbox_room(operator, name)
        operator.apply(sandbox("long", namespace, profile=name, maxAgeSeconds=600), _as(tenant))
        body = wait_reason(operator, "long", namespace, "Ready", 120)
        # The admin shortens the profile below what the Sandbox was admitted with.
        shortened = profile_yaml(resources=SMALL, lifetime={"maxAgeSeconds": 30})
        operator.kubectl(
            "patch", "configmap", "openblox-profiles", "-n", "openblox-system",
            "--type=merge", "-p", json.dumps({"data": {name: shortened}}),
        )  # fmt: skip
        _wait_gone_by(operator, "long", namespace, _created(body) + timedelta(seconds=30))


def test_no_caller_process_runs_in_a_pod_before_its_boundary_is_verified(
    operator: Kube, tenant_ns: tuple[str, str], small_profile: str
) -> None:
    """The probe reads what it finds in the pod; a process of the tenant's started first
    could write into the probe's output. Every exec before the verdict is refused by
    admission, and the first that gets through finds the verdict recorded."""
    namespace, tenant = tenant_ns
    require_sandbox_room(operator, small_profile)
    operator.apply(sandbox("early", namespace, profile=small_profile), _as(tenant))
    wait_for(
        "the cold pod",
        lambda: (
            operator.kubectl("get", "pod", "early", "-n", namespace, check=False).returncode == 0
        ),
        60,
        every=0.1,
    )
    refused = 0
    deadline = time.monotonic() + 120
    while True:
        assert time.monotonic() < deadline, f"no exec got through in 120 s ({refused} refused)"
        attempt = operator.kubectl(
            "exec", _as(tenant), "-n", namespace, "early", "-c", "sandbox", "--", "true",
            check=False, timeout=30,
        )  # fmt: skip
        if attempt.returncode == 0:
            break
        assert "has not been verified yet" in attempt.stderr, attempt.stderr
        refused += 1
    pod = operator.get("pod", "early", namespace)
    assert pod["metadata"]["annotations"].get("openblox.sh/boundary") == "gvisor"
    assert "openblox.sh/unverified" not in pod["metadata"]["labels"]
    assert refused >= 1, "the pod was never seen sealed"
