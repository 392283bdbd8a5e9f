"""API writes per claim from the API server's request counter: which requests count, the
difference of two readings, and the arithmetic per claim."""

from __future__ import annotations

import pytest
from bench.api_writes import delta, parse_writes, per_claim


def _line(verb: str, resource: str, value: float, group: str = "", sub: str = "") -> str:
    return (
        f'apiserver_request_total{{code="201",component="apiserver",dry_run="",group="{group}",'
        f'resource="{resource}",scope="resource",subresource="{sub}",verb="{verb}",'
        f'version="v1"}} {value}'
    )


METRICS = "\n".join(
    [
        "# HELP apiserver_request_total Counter of apiserver requests",
        "# TYPE apiserver_request_total counter",
        _line("POST", "pods", 10),
        _line("PATCH", "pods", 4),
        _line("PUT", "pods", 2, sub="status"),
        _line("DELETE", "pods", 3),
        _line("GET", "pods", 500),
        _line("WATCH", "pods", 50),
        _line("PUT", "leases", 900, group="coordination.k8s.io"),
        _line("POST", "sandboxclaims", 5, group="extensions.agents.x-k8s.io"),
        'apiserver_request_duration_seconds_count{verb="POST",resource="pods"} 99',
    ]
)


def test_only_writes_count_and_leases_are_left_out() -> None:
    assert parse_writes(METRICS) == {
        "pods": 17.0,
        "pods/status": 2.0,
        "sandboxclaims.extensions.agents.x-k8s.io": 5.0,
    }


def test_delta_is_by_resource_largest_first_and_drops_what_did_not_move() -> None:
    before = {"pods": 10.0, "events": 4.0, "configmaps": 1.0}
    after = {"pods": 30.0, "events": 9.0, "configmaps": 1.0, "sandboxes.openblox.sh": 2.0}

    moved = delta(before, after)

    assert moved == {"pods": 20.0, "events": 5.0, "sandboxes.openblox.sh": 2.0}
    assert list(moved) == ["pods", "events", "sandboxes.openblox.sh"]


def test_a_counter_that_went_down_was_reset_and_counts_from_zero() -> None:
    assert delta({"pods": 100.0}, {"pods": 7.0}) == {"pods": 7.0}


def test_per_claim_divides_and_takes_off_the_background_never_below_zero() -> None:
    writes = {"pods": 60.0, "events": 20.0}

    result = per_claim(writes, 20, seconds=2.0, background_per_s=5.0)

    assert result["writes"] == 80.0
    assert result["per_claim"] == 4.0
    assert result["background"] == 10.0
    assert result["per_claim_less_background"] == 3.5
    assert result["by_resource"] == {"pods": 3.0, "events": 1.0}
    assert (
        per_claim({"pods": 1.0}, 1, seconds=10.0, background_per_s=5.0)["per_claim_less_background"]
        == 0.0
    )


def test_per_claim_needs_a_claim() -> None:
    with pytest.raises(ValueError, match="at least one claim"):
        per_claim({}, 0, seconds=1.0)
