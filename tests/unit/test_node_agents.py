"""Which nodes lose their ready label because their agent went quiet (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from openblox.controller.node_agents import NodeAgentWatch
from openblox.models.node_agents import DEFAULT_LEASE_SECONDS, silent_agents
from openblox.names import LABEL_GVISOR_READY

NOW = datetime(2026, 12, 6, 9, 0, tzinfo=UTC)


def _node(name: str, ready: bool = True) -> dict[str, Any]:
    labels = {LABEL_GVISOR_READY: "true"} if ready else {}
    return {"metadata": {"name": name, "labels": labels}}


def _lease(name: str, age: float | None, seconds: object = 40) -> dict[str, Any]:
    spec: dict[str, Any] = {"leaseDurationSeconds": seconds}
    if age is not None:
        spec["renewTime"] = (NOW - timedelta(seconds=age)).isoformat().replace("+00:00", "Z")
    return {"metadata": {"name": name}, "spec": spec}


def test_a_renewed_lease_keeps_the_label_and_a_lapsed_or_missing_one_does_not() -> None:
    nodes = [_node("fresh"), _node("lapsed"), _node("missing"), _node("unstamped")]
    leases = [_lease("fresh", 5), _lease("lapsed", 41), _lease("unstamped", None)]
    silent = {agent.node: agent.why for agent in silent_agents(nodes, leases, NOW)}
    assert set(silent) == {"lapsed", "missing", "unstamped"}
    assert silent["lapsed"] == (
        "its node agent last renewed its Lease openblox-node/lapsed 41 s ago (it lapses after 40 s)"
    )
    assert silent["missing"] == "its node agent holds no Lease openblox-node/missing"
    assert "has no renewTime" in silent["unstamped"]


def test_only_nodes_labelled_ready_are_judged() -> None:
    assert silent_agents([_node("plain", ready=False)], [], NOW) == []


def test_a_lease_without_a_usable_duration_is_held_to_the_default() -> None:
    for seconds in (None, 0, -5, "40", True):
        leases = [_lease("n", DEFAULT_LEASE_SECONDS + 1, seconds)]
        assert [a.node for a in silent_agents([_node("n")], leases, NOW)] == ["n"], seconds
        leases = [_lease("n", DEFAULT_LEASE_SECONDS - 1, seconds)]
        assert silent_agents([_node("n")], leases, NOW) == [], seconds


class _Kube:
    """Answers the pass's two reads, and refuses the patch of the nodes in `refused`."""

    def __init__(self, nodes: list[dict[str, Any]], refused: set[str]) -> None:
        self.nodes = nodes
        self.refused = refused
        self.patched: list[str] = []

    def get(self, request_path: str, **_: Any) -> dict[str, Any]:
        return {"items": self.nodes if request_path.endswith("/nodes") else []}

    def patch(self, request_path: str, body: dict[str, Any]) -> dict[str, Any]:
        name = request_path.rsplit("/", 1)[-1]
        if name in self.refused:
            raise RuntimeError(f"refused {name}")
        assert body == {"metadata": {"labels": {LABEL_GVISOR_READY: None}}}
        self.patched.append(name)
        return {}


class _Events:
    def __init__(self) -> None:
        self.recorded: list[tuple[str, str]] = []

    def record(self, involved: dict[str, Any], reason: str, message: str) -> None:
        self.recorded.append((involved["metadata"]["name"], reason))


def test_one_node_that_cannot_be_written_does_not_keep_the_others_labelled() -> None:
    kube = _Kube([_node("a"), _node("b"), _node("c")], refused={"b"})
    events = _Events()
    watch = NodeAgentWatch(kube, events, held=lambda: True, clock=lambda: NOW)  # type: ignore[arg-type]
    assert watch.run_once() == ["a", "c"]
    assert kube.patched == ["a", "c"]
    assert events.recorded == [("a", "NodeAgentSilent"), ("c", "NodeAgentSilent")]
