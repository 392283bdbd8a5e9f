"""Which clusters openblox refuses, and in what words (openblox.models.cluster_support)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from openblox.models.cluster_support import (
    ADMISSION_GROUP_VERSION,
    ADMISSION_POLICY_RESOURCES,
    MINIMUM_CONTAINERD_MAJOR,
    MINIMUM_KUBERNETES,
    MINIMUM_KUBERNETES_TEXT,
    QUOTED_CHARACTERS,
    Severity,
    SupportProblem,
    errors,
    kubernetes_version,
    node_findings,
    refusal,
    server_findings,
    warnings,
)
from openblox.names import LABEL_GVISOR_NODE, RUNTIME_HANDLER_GVISOR

SERVER = "https://10.0.0.1:6443"
SERVED: dict[str, Any] = {
    "kind": "APIResourceList",
    "groupVersion": ADMISSION_GROUP_VERSION,
    "resources": [
        {"name": "mutatingwebhookconfigurations"},
        {"name": "validatingadmissionpolicies"},
        {"name": "validatingadmissionpolicies/status"},
        {"name": "validatingadmissionpolicybindings"},
        {"name": "validatingwebhookconfigurations"},
    ],
}


def version(git_version: object, minor: object = "30") -> dict[str, Any]:
    return {"major": "1", "minor": minor, "gitVersion": git_version, "platform": "linux/amd64"}


def problems(findings: list[Any]) -> list[tuple[SupportProblem, Severity]]:
    return [(finding.problem, finding.severity) for finding in findings]


# ------------------------------------------------------------------ the API server


@pytest.mark.parametrize(
    ("git_version", "expected"),
    [
        ("v1.30.0", (1, 30)),
        ("v1.37.2", (1, 37)),
        ("v1.30.4-eks-a1b2c3d", (1, 30)),
        ("v1.31.2+k3s1", (1, 31)),
        ("v1.29.15-gke.1200", (1, 29)),
        ("v2.0.0", (2, 0)),
        ("v1.30", (1, 30)),
        ("1.30.0", None),
        ("v1", None),
        ("v1.3a.0", None),
        ("", None),
        ("v99999.1.0", None),
        (None, None),
        (130, None),
        (["v1.30.0"], None),
    ],
)
def test_the_version_comes_from_git_version(git_version: object, expected: object) -> None:
    assert kubernetes_version(version(git_version)) == expected


def test_minor_is_never_trusted() -> None:
    # Providers write "30+"; and a minor that disagrees with gitVersion loses.
    assert kubernetes_version(version("v1.29.4", minor="30+")) == (1, 29)
    assert kubernetes_version({"major": "1", "minor": "30"}) is None


@pytest.mark.parametrize("body", [None, "v1.30.0", [], 42, {"gitVersion": {"v": 1}}])
def test_a_version_body_of_another_shape_is_no_version(body: object) -> None:
    assert kubernetes_version(body) is None


@pytest.mark.parametrize("git_version", ["v1.30.0", "v1.30.4-eks-a1b2c3d", "v1.37.2", "v2.1.0"])
def test_a_supported_server_has_no_findings(git_version: str) -> None:
    assert server_findings(version(git_version), SERVED, SERVER) == []


def test_an_older_server_is_refused_with_the_minimum_and_its_version() -> None:
    findings = server_findings(version("v1.29.4"), SERVED, SERVER)
    assert problems(findings) == [(SupportProblem.KUBERNETES_TOO_OLD, Severity.ERROR)]
    assert findings[0].message == (
        "openblox needs Kubernetes 1.30 or newer (ValidatingAdmissionPolicy "
        "admissionregistration.k8s.io/v1, exec over WebSocket v5); the API server at "
        "https://10.0.0.1:6443 is v1.29.4"
    )


@pytest.mark.parametrize("git_version", ["v1.29.15-gke.1200", "v1.0.0", "v0.99.0", "v1.9.0"])
def test_every_version_below_the_minimum_is_an_error(git_version: str) -> None:
    assert problems(server_findings(version(git_version), SERVED, SERVER)) == [
        (SupportProblem.KUBERNETES_TOO_OLD, Severity.ERROR)
    ]


@pytest.mark.parametrize("body", [None, {}, [], "v1.29.0", version("garbage"), version(7)])
def test_an_unreadable_version_is_a_warning_not_a_refusal(body: object) -> None:
    findings = server_findings(body, SERVED, SERVER)
    assert problems(findings) == [(SupportProblem.KUBERNETES_VERSION_UNKNOWN, Severity.WARNING)]
    assert "was not checked" in findings[0].message
    assert refusal(findings, "nothing was installed") is None


def test_a_hostile_version_is_quoted_bounded_and_printable() -> None:
    hostile = "\x1b[2J" + "x" * 10_000
    [finding] = server_findings(version(hostile), SERVED, SERVER)
    assert "\x1b" not in finding.message
    assert len(finding.message) < QUOTED_CHARACTERS + 300


def test_a_server_without_the_admission_group_version_is_refused() -> None:
    findings = server_findings(version("v1.30.0"), None, SERVER)
    assert problems(findings) == [(SupportProblem.ADMISSION_POLICY_NOT_SERVED, Severity.ERROR)]
    assert "does not serve admissionregistration.k8s.io/v1 at all" in findings[0].message
    assert "Kubernetes 1.30 or newer" in findings[0].message


@pytest.mark.parametrize("hidden", ADMISSION_POLICY_RESOURCES)
def test_a_server_that_hides_the_policy_resources_is_refused_and_told_which(hidden: str) -> None:
    body = {**SERVED, "resources": [r for r in SERVED["resources"] if r["name"] != hidden]}
    [finding] = server_findings(version("v1.31.0"), body, SERVER)
    assert finding.problem is SupportProblem.ADMISSION_POLICY_NOT_SERVED
    assert f"does not serve {hidden} in admissionregistration.k8s.io/v1" in finding.message
    assert "--runtime-config" in finding.message


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"resources": None},
        {"resources": "validatingadmissionpolicies"},
        {"resources": [None, 3, {"name": 5}, {"kind": "ValidatingAdmissionPolicy"}]},
        [],
        "garbage",
    ],
)
def test_a_discovery_body_of_another_shape_serves_nothing(body: object) -> None:
    assert problems(server_findings(version("v1.30.0"), body, SERVER)) == [
        (SupportProblem.ADMISSION_POLICY_NOT_SERVED, Severity.ERROR)
    ]


def test_an_old_server_gets_every_finding_in_one_refusal() -> None:
    findings = server_findings(version("v1.29.0"), None, SERVER)
    message = refusal(findings, "nothing was installed")
    assert message is not None
    assert message.startswith("openblox does not support this cluster:\n- openblox needs")
    assert message.count("\n- ") == 2
    assert message.endswith("\nnothing was installed")


def test_one_error_is_one_line_ending_with_what_happened_instead() -> None:
    message = refusal(server_findings(version("v1.29.4"), SERVED, SERVER), "nothing was installed")
    assert message is not None
    assert "\n" not in message
    assert message.endswith("is v1.29.4; nothing was installed")


# ------------------------------------------------------------------ the nodes


def node(
    name: str = "worker-1",
    *,
    runtime: object = "containerd://2.4.2",
    handlers: object = ("", "runc", "runsc"),
    labelled: bool = True,
) -> dict[str, Any]:
    labels = {LABEL_GVISOR_NODE: "true"} if labelled else {}
    status: dict[str, Any] = {"nodeInfo": {"containerRuntimeVersion": runtime}}
    if handlers is not None:
        status["runtimeHandlers"] = (
            [{"name": h, "features": {}} for h in handlers]
            if isinstance(handlers, tuple)
            else handlers
        )
    return {"metadata": {"name": name, "labels": labels}, "status": status}


def nodes(*items: object) -> dict[str, Any]:
    return {"kind": "NodeList", "items": list(items)}


@pytest.mark.parametrize(
    "runtime",
    ["containerd://2.4.2", "containerd://2.0.0", "containerd://v2.1.4", "containerd://2.0.5-k3s1"],
)
def test_a_gvisor_node_with_containerd_2_and_runsc_has_no_findings(runtime: str) -> None:
    assert node_findings(nodes(node(runtime=runtime))) == []


@pytest.mark.parametrize(
    ("runtime", "shown"),
    [
        ("containerd://1.7.27", "1.7.27"),
        ("containerd://v1.7.35", "v1.7.35"),
        ("containerd://1.7.27-k3s1", "1.7.27-k3s1"),
        ("containerd://1.6.20", "1.6.20"),
    ],
)
def test_containerd_1_on_a_gvisor_node_is_an_error_naming_it(runtime: str, shown: str) -> None:
    findings = node_findings(nodes(node("gpu-7", runtime=runtime)))
    assert problems(findings) == [(SupportProblem.CONTAINERD_TOO_OLD, Severity.ERROR)]
    assert findings[0].node == "gpu-7"
    assert findings[0].message == (
        f"node gpu-7 runs containerd {shown}; openblox needs containerd 2.0 or newer on every "
        "node labelled openblox.sh/gvisor=true"
    )


def test_a_node_without_the_label_is_not_read() -> None:
    old = node("plain", runtime="containerd://1.6.0", handlers=("runc",), labelled=False)
    assert node_findings(nodes(old, node("gvisor-1"))) == []


def test_a_label_of_another_value_does_not_count() -> None:
    other = node("maybe", runtime="containerd://1.7.0")
    other["metadata"]["labels"][LABEL_GVISOR_NODE] = "True"
    assert problems(node_findings(nodes(other))) == [
        (SupportProblem.NO_GVISOR_NODE, Severity.WARNING)
    ]


def test_a_missing_runsc_handler_is_an_error_that_lists_what_the_node_has() -> None:
    findings = node_findings(nodes(node("w2", handlers=("", "runc", "kata"))))
    assert problems(findings) == [(SupportProblem.RUNSC_HANDLER_MISSING, Severity.ERROR)]
    message = findings[0].message
    assert message.startswith("node w2 is labelled openblox.sh/gvisor=true, but its containerd")
    assert "(it reports (default), runc, kata)" in message
    assert "docs/runtimes.md" in message


def test_a_long_handler_list_is_cut_short() -> None:
    many = tuple(f"h{i}" for i in range(50))
    [finding] = node_findings(nodes(node(handlers=many)))
    assert "h7 and 42 more" in finding.message
    assert "h8" not in finding.message


@pytest.mark.parametrize("handlers", [None, [], "runsc", {"name": "runsc"}, [None, 3]])
def test_unreported_handlers_are_a_warning_not_proof_of_absence(handlers: object) -> None:
    findings = node_findings(nodes(node("old-kubelet", handlers=handlers)))
    assert problems(findings) == [(SupportProblem.HANDLERS_NOT_REPORTED, Severity.WARNING)]
    assert "was not checked" in findings[0].message
    assert refusal(findings, "nothing was installed") is None


def test_containerd_1_without_reported_handlers_is_refused_for_its_version() -> None:
    # containerd 1.7 reports no handlers; its version alone refuses it.
    findings = node_findings(nodes(node(runtime="containerd://1.7.35", handlers=None)))
    assert problems(findings) == [
        (SupportProblem.CONTAINERD_TOO_OLD, Severity.ERROR),
        (SupportProblem.HANDLERS_NOT_REPORTED, Severity.WARNING),
    ]


@pytest.mark.parametrize("runtime", [None, "", "containerd", "containerd://", "2.0.0", 2, ["x"]])
def test_an_unreadable_runtime_version_is_a_warning(runtime: object) -> None:
    findings = node_findings(nodes(node(runtime=runtime)))
    assert problems(findings) == [(SupportProblem.RUNTIME_VERSION_UNKNOWN, Severity.WARNING)]


def test_another_runtime_is_a_warning_naming_it() -> None:
    [finding] = node_findings(nodes(node("crio-1", runtime="cri-o://1.30.2")))
    assert (finding.problem, finding.severity) == (SupportProblem.NOT_CONTAINERD, Severity.WARNING)
    assert finding.message.startswith("node crio-1 runs cri-o 1.30;")


@pytest.mark.parametrize("body", [None, {}, {"items": None}, {"items": "x"}, [], "garbage"])
def test_no_labelled_node_is_a_warning(body: object) -> None:
    findings = node_findings(body)
    assert problems(findings) == [(SupportProblem.NO_GVISOR_NODE, Severity.WARNING)]
    assert "RuntimeUnavailable" in findings[0].message


def test_nodes_of_another_shape_are_skipped_or_read_as_far_as_they_go() -> None:
    broken: dict[str, Any] = {
        "metadata": {"name": ["n"], "labels": {LABEL_GVISOR_NODE: "true"}},
        "status": "x",
    }
    findings = node_findings(nodes(None, 3, {"metadata": None}, broken))
    assert problems(findings) == [
        (SupportProblem.RUNTIME_VERSION_UNKNOWN, Severity.WARNING),
        (SupportProblem.HANDLERS_NOT_REPORTED, Severity.WARNING),
    ]
    assert findings[0].node == "<list>"


def test_a_hostile_node_name_is_quoted_printable() -> None:
    [finding] = node_findings(nodes(node("evil\x1b]0;x\x07", runtime="containerd://1.7.0")))
    assert finding.node == "evil?]0;x?"


def test_each_bad_node_gets_its_own_finding_and_one_refusal_names_both() -> None:
    findings = node_findings(
        nodes(node("a", runtime="containerd://1.7.1"), node("b", handlers=("runc",)), node("c"))
    )
    assert [(f.node, f.problem) for f in findings] == [
        ("a", SupportProblem.CONTAINERD_TOO_OLD),
        ("b", SupportProblem.RUNSC_HANDLER_MISSING),
    ]
    message = refusal(findings, "nothing was installed")
    assert message is not None
    assert "- node a runs containerd 1.7.1" in message
    assert "- node b is labelled" in message


def test_errors_and_warnings_split_the_findings() -> None:
    findings = node_findings(nodes(node("a", runtime="containerd://1.7.1", handlers=None)))
    assert [f.problem for f in errors(findings)] == [SupportProblem.CONTAINERD_TOO_OLD]
    assert [f.problem for f in warnings(findings)] == [SupportProblem.HANDLERS_NOT_REPORTED]
    assert refusal(warnings(findings), "x") is None


# ------------------------------------------------------------------ what the documents say

REPO = Path(__file__).resolve().parents[2]


def pinned() -> dict[str, str]:
    """cluster/versions.env, KEY=VALUE a line."""
    pins = {}
    for line in (REPO / "cluster" / "versions.env").read_text().splitlines():
        key, equals, value = line.partition("=")
        if equals and not line.startswith("#"):
            pins[key.strip()] = value.strip().strip('"')
    return pins


def flat(text: str) -> str:
    return " ".join(text.split())


def readme_requirements() -> str:
    readme = (REPO / "README.md").read_text()
    section = readme.split("\n## Requirements\n", 1)[1].split("\n## ", 1)[0]
    return flat(section)


@pytest.mark.parametrize(
    "text",
    [readme_requirements(), flat((REPO / "docs" / "k3s.md").read_text())],
    ids=["README.md", "docs/k3s.md"],
)
def test_the_documents_state_the_minimum_the_checks_enforce(text: str) -> None:
    assert f"{MINIMUM_KUBERNETES_TEXT} or newer" in text
    assert f"containerd {MINIMUM_CONTAINERD_MAJOR}.0 or newer" in text
    assert f"`{RUNTIME_HANDLER_GVISOR}` handler" in text


def test_the_readme_names_where_the_minimum_comes_from_and_who_is_checked() -> None:
    text = readme_requirements()
    assert f"ValidatingAdmissionPolicy `{ADMISSION_GROUP_VERSION}`" in text
    assert f"`{LABEL_GVISOR_NODE}=true`" in text
    assert "`UnsupportedKubernetes`" in text


@pytest.mark.skipif(
    pinned()["CONTAINERD_VERSION"].startswith("v1."),
    reason="the project's clusters still pin containerd 1.x; the move to containerd 2 "
    "(issue 32) has not landed on this branch",
)
def test_the_projects_own_clusters_meet_the_minimum_and_the_readme_names_them() -> None:
    kubernetes, containerd = pinned()["KUBERNETES_VERSION"], pinned()["CONTAINERD_VERSION"]
    found = kubernetes_version({"gitVersion": kubernetes})
    assert found is not None
    assert found >= MINIMUM_KUBERNETES
    assert errors(node_findings(nodes(node(runtime=f"containerd://{containerd}")))) == []
    text = readme_requirements()
    assert f"Kubernetes {kubernetes}" in text
    assert f"containerd {containerd}" in text
