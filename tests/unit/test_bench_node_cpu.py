"""The node's CPU per claim, by process, and the median it allows: pure arithmetic over
two readings of /proc."""

from __future__ import annotations

import os

import pytest
from bench import node_cpu
from bench.node_cpu import CLIENT, LEADER, NODE, REST, STANDBY
from bench.results import Section


def test_per_claim_divides_each_role_and_leaves_the_rest_to_the_node() -> None:
    before = {"kube-apiserver": 10.0, LEADER: 5.0, STANDBY: 2.0, NODE: 100.0}
    after = {"kube-apiserver": 10.75, LEADER: 5.25, STANDBY: 2.125, NODE: 101.5}

    per_claim = node_cpu.per_claim_ms(before, after, 20)

    assert per_claim == pytest.approx(
        {"kube-apiserver": 37.5, LEADER: 12.5, STANDBY: 6.25, REST: 18.75}
    )
    assert list(per_claim) == ["kube-apiserver", REST, LEADER, STANDBY]


def test_a_process_that_ended_or_restarted_counts_nothing_negative() -> None:
    before = {"kubelet": 50.0, NODE: 10.0}
    after = {"kubelet": 0.0, NODE: 10.4}

    per_claim = node_cpu.per_claim_ms(before, after, 2)

    assert per_claim["kubelet"] == 0.0
    assert per_claim[REST] == pytest.approx(200.0)


def test_per_claim_refuses_a_burst_of_nothing() -> None:
    with pytest.raises(ValueError, match="at least one claim"):
        node_cpu.per_claim_ms({NODE: 0.0}, {NODE: 1.0}, 0)


def test_the_median_floor_is_half_the_claims_path_cpu_over_the_cores() -> None:
    per_claim = {"kube-apiserver": 30.0, "etcd": 5.0, LEADER: 10.0, CLIENT: 5.0, STANDBY: 99.0}

    # 10 of 20 claims, each 50 ms of path CPU (the standby is not on the path), 2 cores.
    assert node_cpu.median_floor_ms(per_claim, 20, 2) == pytest.approx(250.0)
    # An odd burst: its median is the 11th of 21.
    assert node_cpu.median_floor_ms(per_claim, 21, 2) == pytest.approx(275.0)


def test_node_busy_time_counts_everything_but_idle_and_iowait() -> None:
    ticks = os.sysconf("SC_CLK_TCK")
    stat = f"cpu  {ticks} {ticks} {ticks} 999999 888888 {ticks} {ticks} {ticks} 0 0\ncpu0 1 2 3\n"

    assert node_cpu.node_busy_seconds(stat) == pytest.approx(6.0)
    assert node_cpu.node_busy_seconds() > 0


def test_a_burst_is_recorded_as_a_table_by_process_and_its_median_floor() -> None:
    section = Section("pool", "Pool")
    per_claim = {"kube-apiserver": 30.0, REST: 12.0, LEADER: 10.0, CLIENT: 5.0, "etcd": 5.0}

    node_cpu.record_burst(section, 20, per_claim)

    (table,) = section.tables
    assert table["columns"] == ["process", "CPU ms per claim"]
    assert table["rows"][:2] == [["kube-apiserver", 30.0], [REST, 12.0]]
    (figure,) = section.figures
    assert figure.key == "pool.burst20.median_floor"
    cores = os.cpu_count() or 1
    assert figure.value == pytest.approx(10 * 50.0 / cores)
