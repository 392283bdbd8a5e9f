from typing import Any

import pytest

from openblox.builders import build_pod, is_owned_by, pod_name
from openblox.builders.pod import rank_owned_pods, unsealed_boundary_patch
from openblox.models import LifetimeTooLong, parse_profile
from tests.unit.factories import CREATED, IMAGE_LINE, SANDBOX_UID, default_profile, make_sandbox


def container(pod: dict[str, Any]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = pod["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def test_the_pod_is_named_after_and_owned_by_its_sandbox() -> None:
    sandbox = make_sandbox(name="job-7")
    pod = build_pod(sandbox, default_profile(), now=CREATED)

    assert pod_name(sandbox) == "job-7"
    assert pod["metadata"]["name"] == "job-7"
    assert pod["metadata"]["namespace"] == "team-a"
    assert pod["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "openblox.sh/v1alpha1",
            "kind": "Sandbox",
            "name": "job-7",
            "uid": SANDBOX_UID,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert is_owned_by(pod, sandbox)


def test_a_namesake_pod_is_not_owned() -> None:
    sandbox = make_sandbox()
    namesake = build_pod(sandbox, default_profile(), now=CREATED)
    namesake["metadata"]["ownerReferences"][0]["uid"] = "another-sandbox"

    assert not is_owned_by(namesake, sandbox)
    assert not is_owned_by({"metadata": {"name": "demo"}}, sandbox)


def test_labels_and_digest_identify_sandbox_and_profile_version() -> None:
    profile = default_profile()
    pod = build_pod(make_sandbox(), profile, now=CREATED)

    assert pod["metadata"]["labels"] == {
        "openblox.sh/sandbox": "demo",
        "openblox.sh/profile": "code-exec",
        "app.kubernetes.io/managed-by": "openblox",
        "openblox.sh/unverified": "",
    }
    assert pod["metadata"]["annotations"] == {
        "openblox.sh/profile-digest": profile.digest,
        "openblox.sh/processes": str(profile.resources.processes),
        "dev.gvisor.flag.oci-seccomp": "true",
        "required-plugins.noderesource.dev/container.sandbox": '["openblox"]',
    }


def test_the_profile_shapes_the_pod() -> None:
    profile = parse_profile(
        "big",
        f"image: example/big:1@sha256:{'7' * 64}\n"
        "runtimeClassName: kata\ncommand: [/bin/sleep, '1e9']\n"
        "user: 4242\ngroup: 4343\n"
        "resources: {cpu: 2, memory: 4Gi, scratch: 1Gi, ephemeralStorage: 1Gi}\n",
    )
    pod = build_pod(make_sandbox(), profile, now=CREATED)
    spec = pod["spec"]

    assert spec["runtimeClassName"] == "kata"
    assert spec["securityContext"]["runAsUser"] == 4242
    assert spec["securityContext"]["runAsGroup"] == 4343
    assert container(pod)["image"] == "example/big:1@sha256:" + "7" * 64
    assert container(pod)["command"] == ["/bin/sleep", "1e9"]
    limits = {"cpu": "2", "memory": "4Gi", "ephemeral-storage": "1Gi"}
    assert container(pod)["resources"] == {"requests": limits, "limits": limits}
    assert [volume["emptyDir"]["sizeLimit"] for volume in spec["volumes"]] == [
        "1Gi",
        "1Gi",
        "16Mi",
    ]


def test_a_cpu_request_below_the_limit_lowers_only_the_cpu_request() -> None:
    profile = parse_profile(
        "dense", IMAGE_LINE + "resources: {cpu: 500m, cpuRequest: 50m, memory: 512Mi}\n"
    )

    resources = container(build_pod(make_sandbox(), profile, now=CREATED))["resources"]

    assert resources["limits"] == {"cpu": "500m", "memory": "512Mi", "ephemeral-storage": "64Mi"}
    # Memory is still requested at its limit: eviction never ranks a sandbox as over it.
    assert resources["requests"] == {**resources["limits"], "cpu": "50m"}


def test_max_age_is_enforced_by_the_kubelet_too() -> None:
    assert (
        build_pod(make_sandbox(), default_profile(), now=CREATED)["spec"]["activeDeadlineSeconds"]
        == 3600
    )
    shortened = make_sandbox(spec={"maxAgeSeconds": 60})
    assert (
        build_pod(shortened, default_profile(), now=CREATED)["spec"]["activeDeadlineSeconds"] == 60
    )


def test_refuses_a_sandbox_that_outlives_its_profile() -> None:
    with pytest.raises(LifetimeTooLong):
        build_pod(make_sandbox(spec={"maxAgeSeconds": 7200}), default_profile(), now=CREATED)


def test_only_the_scratch_and_state_volumes_are_writable() -> None:
    pod = build_pod(make_sandbox(), default_profile(), now=CREATED)

    assert container(pod)["securityContext"]["readOnlyRootFilesystem"] is True
    mounts = {mount["mountPath"]: mount["name"] for mount in container(pod)["volumeMounts"]}
    assert mounts == {"/tmp": "tmp", "/workspace": "workspace", "/run/openblox": "state"}
    assert all(volume["emptyDir"]["medium"] == "Memory" for volume in pod["spec"]["volumes"])


def test_the_pod_has_no_way_to_reach_or_be_reached() -> None:
    pod = build_pod(make_sandbox(), default_profile(), now=CREATED)
    spec = pod["spec"]

    assert spec["dnsPolicy"] == "None"
    assert spec["dnsConfig"]["nameservers"] == ["127.0.0.1"]
    assert "searches" not in spec["dnsConfig"]
    assert spec["enableServiceLinks"] is False
    assert spec["automountServiceAccountToken"] is False
    assert "ports" not in container(pod)
    assert not any(key.endswith("Probe") for key in container(pod))


def test_each_call_returns_an_independent_manifest() -> None:
    first = build_pod(make_sandbox(), default_profile(), now=CREATED)
    first["spec"]["securityContext"]["seccompProfile"]["type"] = "Unconfined"
    first["spec"]["dnsConfig"]["nameservers"].append("8.8.8.8")

    second = build_pod(make_sandbox(), default_profile(), now=CREATED)

    assert second["spec"]["securityContext"]["seccompProfile"] == {
        "type": "Localhost",
        "localhostProfile": "openblox/sandbox.json",
    }
    assert second["spec"]["dnsConfig"]["nameservers"] == ["127.0.0.1"]


def test_a_sandbox_keeps_a_live_pod_first_then_the_one_its_status_names_then_the_oldest() -> None:
    def pod(name: str, created: str, deleting: bool = False) -> dict[str, Any]:
        metadata: dict[str, Any] = {"name": name, "creationTimestamp": created}
        if deleting:
            metadata["deletionTimestamp"] = "2025-01-02T03:09:00Z"
        return {"metadata": metadata}

    old = pod("warm.old", "2025-01-02T03:00:00Z")
    cold = pod("demo", "2025-01-02T03:05:00Z")
    going = pod("demo", "2025-01-02T03:05:00Z", deleting=True)

    def names(pods: list[dict[str, Any]], named: str | None) -> list[str]:
        return [p["metadata"]["name"] for p in rank_owned_pods(pods, named)]

    assert names([old, cold], None) == ["warm.old", "demo"]
    assert names([old, cold], "demo") == ["demo", "warm.old"]
    assert names([going, old], "demo") == ["warm.old", "demo"]


def test_the_boundary_record_unseals_the_pod_in_the_same_write_and_only_that_pod() -> None:
    pod = build_pod(make_sandbox(), default_profile(), now=CREATED)
    pod["metadata"]["uid"] = "pod-uid"
    assert unsealed_boundary_patch(pod, "gvisor") == {
        "metadata": {
            "uid": "pod-uid",
            "annotations": {"openblox.sh/boundary": "gvisor"},
            "labels": {"openblox.sh/unverified": None},
        }
    }
