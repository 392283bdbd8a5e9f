"""How the chaos section judges what it saw: which failures are explained, which Sandboxes
break an invariant, and when a fault counts as over. Pure: no cluster."""

from typing import Any

from bench.chaos_records import (
    FAULT_BOUND_SECONDS,
    Attempt,
    Fault,
    Ledger,
    claim_latency,
    classify,
    first_success_after,
    leaked_pool_pods,
    orphans,
    ready_without_one_pod,
    stuck,
    tally,
)

from openblox.client.errors import (
    ExecTransportError,
    SandboxGone,
    SandboxNotReady,
    SandboxStalled,
    SandboxTimeout,
)
from openblox.transport.errors import ServerError


def _sandbox(uid: str, *, ready: bool, reason: str = "Ready", message: str = "m") -> dict[str, Any]:
    condition = {"type": "Ready", "status": "True" if ready else "False"}
    if reason:
        condition["reason"] = reason
    if message:
        condition["message"] = message
    return {
        "metadata": {"name": f"sbx-{uid}", "uid": uid, "namespace": "ns"},
        "status": {"conditions": [condition]},
    }


def _pod(
    uid: str,
    owner: str | None,
    *,
    pool: str = "",
    sandbox: str = "x",
    going: bool = False,
    phase: str = "Running",
) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": f"pod-{uid}",
        "uid": uid,
        "namespace": "ns",
        "labels": {"openblox.sh/sandbox": sandbox, **({"openblox.sh/pool": pool} if pool else {})},
    }
    if owner:
        metadata["ownerReferences"] = [{"kind": "Sandbox", "uid": owner, "controller": True}]
    if going:
        metadata["deletionTimestamp"] = "2026-12-06T00:00:00Z"
    return {"metadata": metadata, "status": {"phase": phase}}


def test_typed_errors_are_explained_and_name_why() -> None:
    assert classify(SandboxNotReady("s", "NodeLost", "node gone")) == ("not ready: NodeLost", True)
    assert classify(SandboxGone("gone")) == ("sandbox or pod gone", True)
    assert classify(ExecTransportError("broke", 500)) == ("exec stream broke (500)", True)
    assert classify(SandboxStalled(137, 9, 38.0, b"", b"")) == (
        "ended by gVisor after a stall (signal 9)",
        True,
    )
    assert classify(ServerError(503, "Service Unavailable", "")) == (
        "API 503 Service Unavailable",
        True,
    )
    assert classify(ConnectionRefusedError("refused")) == (
        "API unreachable (ConnectionRefusedError)",
        True,
    )


def test_a_timeout_without_a_last_reason_and_an_untyped_error_are_not_explained() -> None:
    assert classify(SandboxTimeout("s", 120, "PodPending"))[1] is True
    assert classify(SandboxTimeout("s", 120, None))[1] is False
    reason, explained = classify(KeyError("status"))
    assert not explained and reason.startswith("unexplained KeyError")


def test_a_ready_sandbox_with_no_pod_or_two_breaks_the_invariant_and_others_do_not() -> None:
    sandboxes = [
        _sandbox("a", ready=True),
        _sandbox("b", ready=True),
        _sandbox("c", ready=True),
        _sandbox("d", ready=False, reason="PodPending"),
    ]
    pods = [
        _pod("1", "a"),
        _pod("2", "b"),
        _pod("3", "b"),
        _pod("4", "c", going=True),  # terminating: not live
        _pod("5", "c", phase="Failed"),
    ]

    assert ready_without_one_pod(sandboxes, pods) == {"b": 2, "c": 0}


def test_only_a_stretch_longer_than_the_bound_is_a_violation() -> None:
    ledger = Ledger()
    ready = [_sandbox("a", ready=True)]

    ledger.observe(ready, [], 100.0)  # its pod died while no operator held the Lease
    ledger.observe(ready, [], 130.0)
    ledger.observe(ready, [_pod("1", "a")], 132.0)
    assert ledger.violations == {}
    assert (ledger.stretches, ledger.longest) == (1, 30.0)

    ledger.observe(ready, [], 200.0)
    ledger.observe(ready, [], 200.0 + FAULT_BOUND_SECONDS + 1)
    assert list(ledger.violations) == ["a"]
    assert ledger.stretches == 2


def test_a_sandbox_past_its_deadline_is_left_to_the_reapers_figure() -> None:
    ledger = Ledger()
    expired = _sandbox("a", ready=True)
    expired["status"]["expiresAt"] = "1970-01-01T00:01:40Z"  # 100 s after the epoch

    ledger.observe([expired], [_pod("1", "a", phase="Failed")], 99.0)
    ledger.observe([expired], [_pod("1", "a", phase="Failed")], 101.0)
    ledger.observe([expired], [_pod("1", "a", phase="Failed")], 500.0)
    assert ledger.stretches == 1 and ledger.violations == {}


def test_a_pod_owned_by_two_sandboxes_over_the_run_was_handed_twice() -> None:
    ledger = Ledger()
    ledger.observe([], [_pod("1", "a"), _pod("2", "b")], 0.0)
    ledger.claimed("2", "ns/b")
    assert ledger.handed_twice() == []

    ledger.observe([], [_pod("1", "c")], 1.0)
    ledger.claimed("2", "ns/d")
    assert ledger.handed_twice() == ["1", "2"]


def test_orphans_are_live_sandbox_pods_whose_sandbox_is_gone() -> None:
    sandboxes = [_sandbox("a", ready=True)]
    pods = [
        _pod("1", "a"),
        _pod("2", "gone"),
        _pod("3", "gone", going=True),
        _pod("4", None, pool="p", sandbox=""),  # a warm pool pod: nobody's yet
        _pod("5", None),  # labelled for a Sandbox, owned by none
    ]

    assert orphans(sandboxes, pods) == ["pod-2", "pod-5"]


def test_pool_pods_past_its_size_and_pods_owned_by_nothing_leak() -> None:
    pods = [
        _pod("1", None, pool="p", sandbox=""),
        _pod("2", None, pool="p", sandbox=""),
        _pod("3", None, pool="p", sandbox="", going=True),
        _pod("4", "a"),
        _pod("5", None, sandbox=""),
    ]

    assert leaked_pool_pods(pods, "p", 2) == ["pod-5"]
    assert leaked_pool_pods(pods, "p", 1) == ["pod-2", "pod-5"]


def test_a_sandbox_not_ready_must_say_why() -> None:
    sandboxes = [
        _sandbox("a", ready=True),
        _sandbox("b", ready=False, reason="NodeLost"),
        _sandbox("c", ready=False, reason=""),
        _sandbox("d", ready=False, message=""),
    ]

    assert stuck(sandboxes) == ["sbx-c", "sbx-d"]


def test_a_fault_is_over_when_a_cycle_started_after_it_comes_through_whole() -> None:
    cycles = [(9.0, 12.0, True), (10.5, 20.0, False), (11.0, 25.0, True), (12.0, 14.0, True)]

    assert first_success_after(10.0, cycles) == 14.0
    assert str(first_success_after(30.0, cycles)) == "nan"


def test_claims_split_by_whether_they_started_inside_a_faults_window() -> None:
    fault = Fault("etcd", injected=10.0, healthy=15.0, recovered=20.0)
    attempts = [
        Attempt("claim", 5.0, 0.3, True, warm=True),
        Attempt("claim", 12.0, 2.0, True, warm=True),
        Attempt("claim", 21.0, 0.4, True, warm=True),
        Attempt("claim", 22.0, 3.0, True, warm=False),
        Attempt("claim", 13.0, 1.0, False, "API unreachable (ConnectionRefusedError)"),
        Attempt("exec", 14.0, 0.1, True),
    ]

    assert claim_latency(attempts, [fault], 60.0) == {
        "warm.quiet": [300.0, 400.0],
        "warm.faults": [2000.0],
        "cold.quiet": [3000.0],
        "cold.faults": [],
    }
    assert tally(attempts, "claim") == {
        "attempted": 5,
        "succeeded": 4,
        "failed": {"API unreachable (ConnectionRefusedError)": 1},
    }


def test_a_fault_with_no_recovery_disturbs_its_fallback_window() -> None:
    assert Fault("freeze", injected=10.0).window(60.0) == (10.0, 70.0)
    assert Fault("freeze", injected=10.0, healthy=90.0).window(60.0) == (10.0, 90.0)
