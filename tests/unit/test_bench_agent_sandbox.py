"""agent-sandbox's objects for the pool section's baseline: its pod is openblox's pool pod
less what only openblox reads, its network is closed, and a claim's status is read right."""

from __future__ import annotations

import copy
from typing import Any

from bench import agent_sandbox_objects as objects

from openblox.builders.pod import build_pool_pod
from openblox.models.pool import Pool
from openblox.models.profile_parsing import parse_profile
from openblox.names import (
    ANNOTATION_NRI_REQUIRED_PLUGINS,
    ANNOTATION_PROCESSES,
    ANNOTATION_RUNSC_OCI_SECCOMP,
    LABEL_SANDBOX,
)

PROFILE = (
    "image: registry.example/sandbox@sha256:" + "a" * 64 + "\n"
    "runtimeClassName: gvisor\n"
    "resources: {cpu: 500m, cpuRequest: 25m, memory: 96Mi, scratch: 8Mi, processes: 128}\n"
)


def _pool_pod() -> dict[str, Any]:
    profile = parse_profile("bench-pool", PROFILE)
    return build_pool_pod(Pool("bench-pool", "bench-pool", ("ns",), 1), "ns", profile, "x")


def test_the_template_pod_is_openblox_pool_pod_spec_less_the_pool_only_fields() -> None:
    pod = _pool_pod()
    template = objects.pod_template(pod)

    expected = {k: v for k, v in pod["spec"].items() if k not in objects.POOL_ONLY_SPEC_FIELDS}
    assert template["spec"] == expected
    container = template["spec"]["containers"][0]
    assert container["image"] == "registry.example/sandbox@sha256:" + "a" * 64
    assert container["imagePullPolicy"] == "IfNotPresent"
    assert container["resources"]["limits"]["cpu"] == "500m"
    assert container["resources"]["requests"]["cpu"] == "25m"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert template["spec"]["runtimeClassName"] == "gvisor"
    assert template["spec"]["automountServiceAccountToken"] is False
    assert "hostname" not in template["spec"]


def test_the_template_keeps_only_the_runtime_annotations_and_no_openblox_labels() -> None:
    template = objects.pod_template(_pool_pod())

    assert template["metadata"]["annotations"] == {ANNOTATION_RUNSC_OCI_SECCOMP: "true"}
    assert "labels" not in template["metadata"]
    for dropped in (ANNOTATION_PROCESSES, ANNOTATION_NRI_REQUIRED_PLUGINS, LABEL_SANDBOX):
        assert dropped not in str(template["metadata"])


def test_building_the_template_leaves_openblox_pod_untouched() -> None:
    pod = _pool_pod()
    before = repr(pod)
    objects.pod_template(pod)["spec"]["containers"][0]["image"] = "changed"
    assert repr(pod) == before


def test_the_template_leaves_the_network_policy_to_the_namespace_which_denies_all() -> None:
    template = objects.sandbox_template("t", "ns", objects.pod_template(_pool_pod()))
    policy = objects.deny_all_policy("ns")

    assert template["spec"]["networkPolicyManagement"] == "Unmanaged"
    assert template["apiVersion"] == "extensions.agents.x-k8s.io/v1beta1"
    assert policy["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}


def test_a_claim_names_its_pool_and_a_pool_its_template() -> None:
    claim = objects.claim("c", "ns", "p")
    pool = objects.warm_pool("p", "ns", "t", 20)

    assert claim["spec"] == {"warmPoolRef": {"name": "p"}}
    assert pool["spec"] == {"replicas": 20, "sandboxTemplateRef": {"name": "t"}}
    assert objects.extensions_path("ns", "sandboxclaims", "c") == (
        "/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/ns/sandboxclaims/c"
    )


def _claim(status: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "c1"}, "status": status}


def test_a_claim_is_ready_only_when_its_ready_condition_is_true() -> None:
    assert not objects.is_ready(_claim({}))
    assert not objects.is_ready(_claim({"conditions": [{"type": "Ready", "status": "False"}]}))
    assert objects.is_ready(
        _claim(
            {
                "conditions": [
                    {"type": "Other", "status": "False"},
                    {"type": "Ready", "status": "True"},
                ]
            }
        )
    )


def test_a_claim_is_warm_when_it_adopted_a_pool_sandbox_and_cold_when_named_after_itself() -> None:
    assert objects.is_warm(_claim({"sandbox": {"name": "bench-pool-x7k2p"}}))
    assert not objects.is_warm(_claim({"sandbox": {"name": "c1"}}))
    assert not objects.is_warm(_claim({}))
    assert objects.sandbox_name(_claim({"sandbox": {"name": "c1"}})) == "c1"


def test_ready_replicas_reads_zero_before_the_pool_has_a_status() -> None:
    assert objects.ready_replicas({}) == 0
    assert objects.ready_replicas({"status": {"readyReplicas": 7}}) == 7


def test_a_pod_made_from_the_template_with_api_defaults_added_shows_no_difference() -> None:
    template = objects.pod_template(_pool_pod())
    pod = copy.deepcopy(template)
    pod["spec"]["containers"][0]["terminationMessagePath"] = "/dev/termination-log"
    pod["spec"]["schedulerName"] = "default-scheduler"
    assert objects.differences(template, pod) == []


def test_a_pod_that_lost_its_runtime_class_or_its_limits_says_where() -> None:
    template = objects.pod_template(_pool_pod())
    pod = copy.deepcopy(template)
    del pod["spec"]["runtimeClassName"]
    pod["spec"]["containers"][0]["resources"] = {}
    assert objects.differences(template, pod) == [
        "runtimeClassName",
        "containers[sandbox].resources",
    ]


def test_empty_values_a_go_client_drops_are_no_difference() -> None:
    template = objects.pod_template(_pool_pod())
    pod = copy.deepcopy(template)
    del pod["spec"]["securityContext"]["supplementalGroups"]
    for variable in pod["spec"]["containers"][0]["env"]:
        if variable["value"] == "":
            del variable["value"]
    assert template["spec"]["securityContext"]["supplementalGroups"] == []
    assert objects.differences(template, pod) == []
