"""The operator on the real cluster: a Sandbox becomes one hardened gVisor pod, bad input
is refused with a clear message, and failures are recovered without duplicates."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from openblox.models import parse_quantity
from tests.cluster.capacity import require_sandbox_room
from tests.cluster.kubectl import Kube
from tests.cluster.sandboxes import (
    OPERATOR_SA,
    admission_has,
    extra_profiles,
    get_sandbox,
    opt_in,
    pod_of,
    profile_yaml,
    ready_condition,
    sandbox,
    sandbox_pods,
    wait_for,
    wait_reason,
)

pytestmark = pytest.mark.cluster


# requests == limits: a CPU limit of a few millicores throttles the Sentry itself, so
# 10m is the least that still boots and answers an exec promptly.
def tiny_profile() -> str:
    """Made when a test runs: it names the image `make up` built, which a fresh clone has
    not built when its tests are collected."""
    return profile_yaml(resources={"cpu": "10m", "memory": "96Mi", "scratch": "16Mi"})


@pytest.fixture
def sandboxes_ns(operator: Kube, namespace: str) -> str:
    opt_in(operator, namespace)
    return namespace


def test_a_sandbox_becomes_exactly_one_hardened_gvisor_pod(
    operator: Kube, sandboxes_ns: str
) -> None:
    operator.apply(sandbox("box", sandboxes_ns))
    body = wait_reason(operator, "box", sandboxes_ns, "Ready")
    status = body["status"]
    assert status["boundary"] == "gvisor"
    assert status["runtimeClassName"] == "gvisor"
    assert status["observedGeneration"] == body["metadata"]["generation"]
    assert {c["type"] for c in status["conditions"]} == {
        "Ready",
        "ProfileResolved",
        "RuntimeAvailable",
        "PodReady",
    }

    pods = sandbox_pods(operator, sandboxes_ns)
    assert len(pods) == 1
    pod = pods[0]
    assert pod["metadata"]["name"] == "box"
    owner = pod["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"]) == (
        "Sandbox",
        body["metadata"]["uid"],
        True,
    )
    spec = pod["spec"]
    assert spec["runtimeClassName"] == "gvisor"
    assert spec["automountServiceAccountToken"] is False
    assert spec["enableServiceLinks"] is False
    container = spec["containers"][0]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    requests, limits = container["resources"]["requests"], container["resources"]["limits"]
    # Burstable on CPU only: every limit is set, and memory is requested at its limit.
    assert set(limits) == {"cpu", "memory", "ephemeral-storage"}
    assert requests["memory"] == limits["memory"]
    assert parse_quantity(requests["cpu"]) <= parse_quantity(limits["cpu"])

    # Pod Security `restricted` is enforced on the namespace, and the pod passed it.
    labels = operator.get("namespace", sandboxes_ns)["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    # The default-deny policy exists and selects sandbox pods.
    policy = operator.get("networkpolicy", "openblox-default-deny", sandboxes_ns)
    assert sorted(policy["spec"]["policyTypes"]) == ["Egress", "Ingress"]


def test_printer_columns_and_explain(operator: Kube, sandboxes_ns: str) -> None:
    operator.apply(sandbox("cols", sandboxes_ns))
    wait_reason(operator, "cols", sandboxes_ns, "Ready")
    table = operator.kubectl("get", "sbx", "cols", "-n", sandboxes_ns).stdout
    header, row = table.splitlines()[:2]
    assert header.split() == ["NAME", "PROFILE", "READY", "REASON", "BOUNDARY", "EXPIRES", "AGE"]
    assert row.split()[1:5] == ["code-exec", "True", "Ready", "gvisor"]
    explained = operator.kubectl("explain", "sandbox.spec").stdout
    for field in ("profile", "idleTimeoutSeconds", "maxAgeSeconds"):
        assert field in explained


def test_unknown_profile_is_refused_at_apply_time(operator: Kube, sandboxes_ns: str) -> None:
    result = operator.apply(sandbox("nope", sandboxes_ns, profile="no-such-profile"), check=False)
    assert result.returncode != 0
    assert 'profile "no-such-profile" does not exist' in result.stderr
    assert "code-exec" in result.stderr  # the message names what is available
    assert get_sandbox(operator, "nope", sandboxes_ns) is None


def test_namespace_that_has_not_opted_in_is_refused(operator: Kube, namespace: str) -> None:
    result = operator.apply(sandbox("x", namespace), check=False)
    assert result.returncode != 0
    assert "has not opted in to sandboxes" in result.stderr
    assert "openblox.sh/sandboxes=enabled" in result.stderr


@pytest.mark.parametrize("field", ["image", "runtimeClassName", "runAsUser", "capabilities"])
def test_spec_fields_that_would_weaken_it_do_not_exist(
    operator: Kube, sandboxes_ns: str, field: str
) -> None:
    manifest = sandbox("weak", sandboxes_ns, **{field: "anything"})
    result = operator.apply(manifest, "--validate=strict", check=False)
    assert result.returncode != 0
    assert f'unknown field "spec.{field}"' in result.stderr
    assert get_sandbox(operator, "weak", sandboxes_ns) is None


def test_profile_is_immutable(operator: Kube, sandboxes_ns: str) -> None:
    operator.apply(sandbox("immut", sandboxes_ns))
    result = operator.kubectl(
        "patch",
        "sandbox",
        "immut",
        "-n",
        sandboxes_ns,
        "--type=merge",
        "-p",
        '{"spec":{"profile":"code-exec-kata"}}',
        check=False,
    )
    assert result.returncode != 0
    assert "profile is immutable" in result.stderr
    assert get_sandbox(operator, "immut", sandboxes_ns)["spec"]["profile"] == "code-exec"  # type: ignore[index]


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("x" * 64, "at most 63 characters"),
        ("has.dot", "DNS label"),
    ],
)
def test_invalid_names_are_refused(
    operator: Kube, sandboxes_ns: str, name: str, message: str
) -> None:
    result = operator.apply(sandbox(name, sandboxes_ns), check=False)
    assert result.returncode != 0
    assert message in result.stderr


@pytest.mark.parametrize("field", ["maxAgeSeconds", "idleTimeoutSeconds"])
def test_a_lifetime_longer_than_the_profile_allows_is_refused_at_admission(
    operator: Kube, sandboxes_ns: str, field: str
) -> None:
    operator.apply(sandbox("keeps", sandboxes_ns))
    wait_reason(operator, "keeps", sandboxes_ns, "Ready")

    long = sandbox("long", sandboxes_ns)
    long["spec"][field] = 999_999
    result = operator.apply(long, check=False)
    assert result.returncode != 0
    assert "ValidatingAdmissionPolicy 'openblox-sandbox-profile'" in result.stderr
    assert f'spec.{field} is 999999s but profile "code-exec" allows at most' in result.stderr
    assert get_sandbox(operator, "long", sandboxes_ns) is None

    # Lengthening a running Sandbox's life through an update is refused the same way; an
    # update that leaves the spec alone (the client's activity stamp) is not checked.
    patch = json.dumps({"spec": {field: 999_999}})
    result = operator.kubectl(
        "patch", "sandbox", "keeps", "-n", sandboxes_ns, "--type=merge", "-p", patch, check=False
    )
    assert result.returncode != 0
    assert f"spec.{field} is 999999s" in result.stderr
    operator.kubectl(
        "annotate", "sandbox", "keeps", "-n", sandboxes_ns, "--overwrite", "example.com/seen=yes"
    )
    # Nothing that ran was lost: the existing Sandbox is still Ready and runs commands.
    assert ready_condition(get_sandbox(operator, "keeps", sandboxes_ns) or {})["status"] == "True"
    done = operator.kubectl(
        "exec", "keeps", "-n", sandboxes_ns, "-c", "sandbox", "--", "sh", "-c", "echo alive"
    )
    assert done.stdout == "alive\n"
    assert len(sandbox_pods(operator, sandboxes_ns)) == 1


def test_ordinary_users_cannot_touch_profiles(operator: Kube) -> None:
    as_user = ("--as=jane", "--as-group=system:authenticated")
    for verb in (["get"], ["patch", "--type=merge", "-p", '{"data":{"x":"y"}}'], ["delete"]):
        result = operator.kubectl(
            verb[0],
            "configmap",
            "openblox-profiles",
            "-n",
            "openblox-system",
            *verb[1:],
            *as_user,
            check=False,
        )
        assert result.returncode != 0
        assert "Forbidden" in result.stderr or "forbidden" in result.stderr


def test_nobody_but_the_operator_makes_sandbox_pods(operator: Kube, sandboxes_ns: str) -> None:
    """Even a cluster admin is refused: the policy checks the requester, not RBAC."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "fake",
            "namespace": sandboxes_ns,
            "labels": {"openblox.sh/sandbox": "fake"},
        },
        "spec": {"containers": [{"name": "c", "image": "openblox.local/sandbox:0.1.0"}]},
    }
    result = operator.apply(pod, check=False)
    assert result.returncode != 0
    assert "managed by the openblox operator only" in result.stderr


def test_the_scheduler_may_preempt_a_sandbox_pod_but_an_admin_may_not_delete_it(
    operator: Kube, sandboxes_ns: str
) -> None:
    """The operator's PriorityClass only helps if the scheduler's preemption gets through."""
    operator.apply(sandbox("victim", sandboxes_ns))
    wait_reason(operator, "victim", sandboxes_ns, "Ready")
    victim = pod_of(operator, "victim", sandboxes_ns)
    dry_run = ("delete", "pod", victim, "-n", sandboxes_ns, "--dry-run=server")
    refused = operator.kubectl(*dry_run, check=False)
    assert refused.returncode != 0
    assert "managed by the openblox operator only" in refused.stderr
    operator.kubectl(*dry_run, "--as=system:kube-scheduler")
    pod = operator.get("pod", victim, sandboxes_ns)
    assert "deletionTimestamp" not in pod["metadata"]
    # A Burstable sandbox still ranks below the control plane: the scheduler picks it
    # as a victim, never the operator or the preview proxy.
    assert pod["status"]["qosClass"] == "Burstable"
    control_plane = operator.get("priorityclass", "openblox-control-plane")
    assert pod["spec"].get("priority", 0) < control_plane["value"]
    assert control_plane["preemptionPolicy"] == "PreemptLowerPriority"


def test_broken_profiles_are_refused_and_nothing_is_lost(operator: Kube, sandboxes_ns: str) -> None:
    good = operator.get("configmap", "openblox-profiles", "openblox-system")["data"]["code-exec"]
    garbage = {
        "bad-yaml": "image: [unclosed",
        "bad-field": profile_yaml(imagePullPolicy="Always"),
        "bad-root": profile_yaml(user=0),
        "bad-runtime": profile_yaml(runtimeClassName="runc"),
        "bad-tag": profile_yaml(image="openblox.local/sandbox:0.1.0"),
    }
    try:
        with extra_profiles(operator, garbage):
            # An admin's edit turns the shipped profile to garbage too.
            _set_profile(operator, "code-exec", "this: is: not: a profile")
            events = wait_for("ProfileRefused events", lambda: _refusals(operator, 6), timeout=30)
            messages = " ".join(e["message"] for e in events)
            assert 'profile "bad-root" is invalid: user must be between 1' in messages
            assert (
                'profile "bad-runtime" is invalid: runtimeClassName "runc" is not approved'
                in messages
            )
            assert 'unknown field "imagePullPolicy"' in messages
            assert (
                'profile "bad-tag" is invalid: image "openblox.local/sandbox:0.1.0" is not pinned '
                "by digest" in messages
            )
            assert "its last good version stays in service" in messages
            # The last good code-exec still serves new sandboxes.
            operator.apply(sandbox("survivor", sandboxes_ns))
            wait_reason(operator, "survivor", sandboxes_ns, "Ready")
    finally:
        _set_profile(operator, "code-exec", good)


def _set_profile(kube: Kube, name: str, text: str) -> None:
    kube.kubectl(
        "patch",
        "configmap",
        "openblox-profiles",
        "-n",
        "openblox-system",
        "--type=merge",
        "-p",
        json.dumps({"data": {name: text}}),
    )


def _refusals(kube: Kube, at_least: int) -> list[dict[str, Any]]:
    events = [
        e
        for e in kube.events("openblox-system", "openblox-profiles")
        if e["reason"] == "ProfileRefused"
    ]
    return events if len(events) >= at_least else []


def test_runtime_class_missing_fails_closed(operator: Kube, sandboxes_ns: str) -> None:
    profile = profile_yaml(unsafe=True, runtimeClassName="no-such-runtimeclass")
    with extra_profiles(operator, {"test-missing-rc": profile}):
        wait_for("admission params", lambda: admission_has(operator, "test-missing-rc"), 30)
        operator.apply(sandbox("norc", sandboxes_ns, profile="test-missing-rc"))
        body = wait_reason(operator, "norc", sandboxes_ns, "RuntimeUnavailable")
        assert (
            'RuntimeClass "no-such-runtimeclass" does not exist' in ready_condition(body)["message"]
        )
        assert sandbox_pods(operator, sandboxes_ns) == []
        events = [
            e for e in operator.events(sandboxes_ns, "norc") if e["reason"] == "RuntimeUnavailable"
        ]
        assert events


def test_handler_missing_on_the_node_fails_closed(operator: Kube, sandboxes_ns: str) -> None:
    operator.apply(
        {
            "apiVersion": "node.k8s.io/v1",
            "kind": "RuntimeClass",
            "metadata": {"name": "test-no-handler"},
            "handler": "nonexistent",
        }
    )
    profile = profile_yaml(unsafe=True, runtimeClassName="test-no-handler")
    try:
        with extra_profiles(operator, {"test-no-handler": profile}):
            wait_for("admission params", lambda: admission_has(operator, "test-no-handler"), 30)
            operator.apply(sandbox("nohandler", sandboxes_ns, profile="test-no-handler"))
            body = wait_reason(operator, "nohandler", sandboxes_ns, "RuntimeUnavailable", 90)
            assert "could not start the pod's runtime" in ready_condition(body)["message"]
            pod = operator.get("pod", pod_of(operator, "nohandler", sandboxes_ns), sandboxes_ns)
            assert pod["status"]["phase"] == "Pending"
            assert not any(
                c.get("state", {}).get("running")
                for c in pod["status"].get("containerStatuses", [])
            )
    finally:
        operator.kubectl("delete", "runtimeclass", "test-no-handler", check=False)


def test_kata_profile_refuses_without_confirmed_policy_enforcement(
    operator: Kube, sandboxes_ns: str
) -> None:
    operator.apply(sandbox("kata", sandboxes_ns, profile="code-exec-kata"))
    body = wait_reason(operator, "kata", sandboxes_ns, "RuntimeUnavailable")
    assert "NetworkPolicy enforcement" in ready_condition(body)["message"]
    assert sandbox_pods(operator, sandboxes_ns) == []


def test_a_pod_deleted_by_hand_is_recreated(operator: Kube, sandboxes_ns: str) -> None:
    operator.apply(sandbox("phoenix", sandboxes_ns))
    wait_reason(operator, "phoenix", sandboxes_ns, "Ready")
    phoenix = pod_of(operator, "phoenix", sandboxes_ns)
    first = operator.get("pod", phoenix, sandboxes_ns)["metadata"]["uid"]
    operator.kubectl("delete", "pod", phoenix, "-n", sandboxes_ns, f"--as={OPERATOR_SA}")

    def replaced() -> bool:
        pods = sandbox_pods(operator, sandboxes_ns)
        return (
            len(pods) == 1
            and pods[0]["metadata"]["uid"] != first
            and pods[0]["status"].get("phase") == "Running"
        )

    wait_for("a new pod", replaced)
    wait_reason(operator, "phoenix", sandboxes_ns, "Ready")


def test_a_guest_that_kills_its_own_init_is_recovered(operator: Kube, sandboxes_ns: str) -> None:
    operator.apply(sandbox("suicide", sandboxes_ns))
    wait_reason(operator, "suicide", sandboxes_ns, "Ready")
    suicide = pod_of(operator, "suicide", sandboxes_ns)
    first = operator.get("pod", suicide, sandboxes_ns)["metadata"]["uid"]
    operator.exec(suicide, sandboxes_ns, "kill", "-9", "1")

    def recovered() -> bool:
        pods = sandbox_pods(operator, sandboxes_ns)
        body = get_sandbox(operator, "suicide", sandboxes_ns) or {}
        return (
            len(pods) == 1
            and pods[0]["metadata"]["uid"] != first
            and ready_condition(body).get("reason") == "Ready"
        )

    wait_for("recovery with a new pod", recovered, timeout=120)
    events = [e["reason"] for e in operator.events(sandboxes_ns, "suicide")]
    assert "PodFailed" in events


def test_max_age_reaps_the_sandbox(operator: Kube, sandboxes_ns: str) -> None:
    operator.apply(sandbox("brief", sandboxes_ns, maxAgeSeconds=8))
    wait_reason(operator, "brief", sandboxes_ns, "Ready")
    wait_for("reaping", lambda: get_sandbox(operator, "brief", sandboxes_ns) is None, timeout=60)
    reasons = [(e["reason"], e["message"]) for e in operator.events(sandboxes_ns, "brief")]
    assert any(r == "Expired" and "maximum age" in m for r, m in reasons), reasons


def test_idle_timeout_reaps_and_activity_postpones_it(operator: Kube, sandboxes_ns: str) -> None:
    operator.apply(sandbox("idle", sandboxes_ns, idleTimeoutSeconds=10))
    operator.apply(sandbox("busy", sandboxes_ns, idleTimeoutSeconds=10))
    wait_reason(operator, "idle", sandboxes_ns, "Ready")
    wait_reason(operator, "busy", sandboxes_ns, "Ready")
    deadline = time.monotonic() + 40
    while get_sandbox(operator, "idle", sandboxes_ns) is not None:
        assert time.monotonic() < deadline, "idle sandbox was not reaped"
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        operator.kubectl(
            "annotate",
            "--overwrite",
            "sandbox",
            "busy",
            "-n",
            sandboxes_ns,
            f"openblox.sh/last-activity={stamp}",
        )
        time.sleep(2)
    assert get_sandbox(operator, "busy", sandboxes_ns) is not None
    reasons = [
        e["message"] for e in operator.events(sandboxes_ns, "idle") if e["reason"] == "Expired"
    ]
    assert any("idle timeout" in m for m in reasons)


def _all_ready_one_pod_each(kube: Kube, namespace: str, names: list[str]) -> bool:
    listing = json.loads(kube.kubectl("get", "sandboxes", "-n", namespace, "-o", "json").stdout)
    ready = {
        s["metadata"]["name"]
        for s in listing["items"]
        if ready_condition(s).get("status") == "True"
    }
    pods = sandbox_pods(kube, namespace)
    owners = [p["metadata"]["ownerReferences"][0]["name"] for p in pods]
    assert len(owners) == len(set(owners)), f"duplicate pods: {owners}"
    return ready >= set(names) and len(pods) == len(names)


def _many(namespace: str, count: int, prefix: str, profile: str) -> tuple[list[str], str]:
    names = [f"{prefix}-{i:03d}" for i in range(count)]
    manifests = [sandbox(name, namespace, profile=profile) for name in names]
    return names, "\n---\n".join(json.dumps(m) for m in manifests)


def test_a_hundred_sandboxes_at_once(operator: Kube, sandboxes_ns: str) -> None:
    with extra_profiles(operator, {"test-tiny": tiny_profile()}):
        wait_for("admission params", lambda: admission_has(operator, "test-tiny"), 30)
        require_sandbox_room(operator, "test-tiny", 100)
        names, manifest = _many(sandboxes_ns, 100, "s", "test-tiny")
        operator.kubectl("apply", "-f", "-", stdin=manifest, timeout=300)
        wait_for(
            "100 ready sandboxes",
            lambda: _all_ready_one_pod_each(operator, sandboxes_ns, names),
            timeout=600,
            every=3,
        )
        operator.kubectl("delete", "sandboxes", "--all", "-n", sandboxes_ns, "--wait=false")


def test_operator_killed_mid_create_converges_without_duplicates(
    operator: Kube, sandboxes_ns: str
) -> None:
    with extra_profiles(operator, {"test-tiny": tiny_profile()}):
        wait_for("admission params", lambda: admission_has(operator, "test-tiny"), 30)
        require_sandbox_room(operator, "test-tiny", 15)
        names, manifest = _many(sandboxes_ns, 15, "k", "test-tiny")
        operator.kubectl("apply", "-f", "-", stdin=manifest)
        operator.kubectl(
            "delete",
            "pod",
            "-n",
            "openblox-system",
            "-l",
            "app.kubernetes.io/name=openblox-operator",
            "--wait=false",
        )
        wait_for(
            "15 ready sandboxes after the restart",
            lambda: _all_ready_one_pod_each(operator, sandboxes_ns, names),
            timeout=300,
            every=2,
        )
        operator.kubectl(
            "rollout",
            "status",
            "deployment/openblox-operator",
            "-n",
            "openblox-system",
            "--timeout=120s",
        )


def _operator_metrics(kube: Kube) -> str:
    """The /metrics of the replica holding the Lease (the one that reconciles), through
    the API server's pod proxy."""
    lease = kube.get("lease", "openblox-operator", "openblox-system")
    name = str(lease["spec"]["holderIdentity"]).rsplit("_", 1)[0]
    return kube.kubectl(
        "get", "--raw", f"/api/v1/namespaces/openblox-system/pods/{name}:9090/proxy/metrics"
    ).stdout


def _sample(text: str, name: str, **labels: str) -> float | None:
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    prefix = f"{name}{{{wanted}}} " if labels else f"{name} "
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line.split()[-1])
    return None


def test_metrics_count_sandboxes_by_ready_condition(operator: Kube, sandboxes_ns: str) -> None:
    operator.apply(sandbox("metered", sandboxes_ns))
    operator.apply(sandbox("kata-metered", sandboxes_ns, profile="code-exec-kata"))
    wait_reason(operator, "metered", sandboxes_ns, "Ready")
    wait_reason(operator, "kata-metered", sandboxes_ns, "RuntimeUnavailable")

    def counted() -> str | None:
        text = _operator_metrics(operator)
        ready = _sample(text, "openblox_sandboxes", ready="True", reason="Ready") or 0
        down = _sample(text, "openblox_sandboxes", ready="False", reason="RuntimeUnavailable") or 0
        return text if ready >= 1 and down >= 1 else None

    text = wait_for("the sandboxes gauge", counted, 30, every=1)
    assert (_sample(text, "openblox_sandbox_create_to_ready_seconds_count") or 0) >= 1
    assert (_sample(text, "openblox_reconciles_total", trigger="sandbox") or 0) >= 1
    assert _sample(text, "openblox_reconcile_errors_total") is not None
    assert "# TYPE openblox_sandboxes_reaped_total counter" in text


def test_a_deleted_network_policy_is_made_again(operator: Kube, sandboxes_ns: str) -> None:
    operator.apply(sandbox("walled", sandboxes_ns))
    wait_reason(operator, "walled", sandboxes_ns, "Ready")
    first = operator.get("networkpolicy", "openblox-default-deny", sandboxes_ns)
    operator.kubectl("delete", "networkpolicy", "openblox-default-deny", "-n", sandboxes_ns)

    def remade() -> bool:
        result = operator.kubectl(
            "get",
            "networkpolicy",
            "openblox-default-deny",
            "-n",
            sandboxes_ns,
            "-o",
            "json",
            check=False,
        )
        return (
            result.returncode == 0
            and json.loads(result.stdout)["metadata"]["uid"] != first["metadata"]["uid"]
        )

    wait_for("the default-deny policy again", remade, 30)


def test_a_pod_the_api_server_refuses_is_named_on_the_sandbox_and_made_once_allowed(
    operator: Kube, namespace: str
) -> None:
    """A quota (or an admission webhook, a LimitRange) of the user's cluster refuses the
    pod: the Sandbox says so in the API server's words, an Event too, and the same Sandbox
    gets its pod once the refusal is lifted; nothing is lost."""
    require_sandbox_room(operator, "code-exec", 1)
    opt_in(operator, namespace)
    operator.apply(
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "no-pods", "namespace": namespace},
            "spec": {"hard": {"pods": "0"}},
        }
    )
    operator.apply(sandbox("refused", namespace))
    body = wait_reason(operator, "refused", namespace, "PodNotCreated", 60)
    message = ready_condition(body)["message"]
    assert "the API server refused the pod" in message, message
    assert "exceeded quota: no-pods" in message, message
    reasons = {e["reason"] for e in operator.events(namespace, "refused")}
    assert "PodNotCreated" in reasons, reasons
    uid = body["metadata"]["uid"]
    operator.kubectl("delete", "resourcequota", "no-pods", "-n", namespace)
    ready = wait_reason(operator, "refused", namespace, "Ready", 180)
    assert ready["metadata"]["uid"] == uid
