"""The scale section's simulated nodes are fenced off from real pods, and real nodes
from the section's pods: what each side's scheduling sees is pinned here."""

from __future__ import annotations

import yaml
from bench import api_writes, kwok
from bench.sections.scale import _steps

from openblox.names import LABEL_GVISOR_NODE, LABEL_GVISOR_READY


def test_a_simulated_node_is_tainted_and_carries_no_label_the_node_agent_selects() -> None:
    node = kwok.node_body("r1", kwok.node_name("r1", 7))
    labels = node["metadata"]["labels"]
    assert node["metadata"]["name"] == "obx-kwok-r1-0007"
    assert node["metadata"]["annotations"] == {kwok.MANAGED_ANNOTATION: "fake"}
    assert labels[LABEL_GVISOR_READY] == "true"
    assert LABEL_GVISOR_NODE not in labels  # the agent's DaemonSet selects that one
    assert node["spec"]["taints"] == [
        {"key": kwok.NODE_LABEL, "value": "r1", "effect": "NoSchedule"}
    ]


def test_the_bench_runtime_class_selects_only_this_runs_nodes_and_tolerates_their_taint() -> None:
    scheduling = kwok.runtime_class("r1")["scheduling"]
    assert scheduling["nodeSelector"] == {kwok.NODE_LABEL: "r1"}
    assert scheduling["tolerations"] == [
        {"key": kwok.NODE_LABEL, "operator": "Exists", "effect": "NoSchedule"}
    ]


def test_the_node_stage_offers_what_a_sandbox_pod_asks_for_and_the_handler() -> None:
    stage = yaml.safe_load(kwok.NODE_READY_STAGE)
    template = stage["spec"]["next"]["statusTemplate"]
    assert stage["spec"]["resourceRef"] == {"apiGroup": "v1", "kind": "Node"}
    # Below the conditions the template is plain YAML (no template actions).
    status = yaml.safe_load(template[template.index("addresses:") :])
    assert status["allocatable"]["ephemeral-storage"] == "1Ti"
    assert status["allocatable"] == status["capacity"]
    assert [h["name"] for h in status["runtimeHandlers"]] == ["runsc"]
    assert status["addresses"] == [{"address": kwok.NODE_IP, "type": "InternalIP"}]
    assert status["phase"] == "Running"  # kwok's heartbeat stage selects Running nodes


def test_the_ramp_stops_at_round_counts_and_at_the_target() -> None:
    assert _steps(10_000) == [250, 500, 1000, 2500, 5000, 7500, 10_000]
    assert _steps(3000) == [250, 500, 1000, 2500, 3000]
    assert _steps(200) == [200]


def test_watch_requests_are_counted_apart_from_writes() -> None:
    text = "\n".join(
        [
            'apiserver_request_total{code="200",resource="pods",verb="WATCH"} 7',
            'apiserver_request_total{code="201",resource="pods",verb="POST"} 3',
            'apiserver_request_total{code="200",resource="leases",verb="WATCH"} 9',
        ]
    )
    assert api_writes.parse_requests(text, frozenset({"WATCH"})) == {"pods": 7.0}
    assert api_writes.parse_writes(text) == {"pods": 3.0}
