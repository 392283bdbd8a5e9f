"""What one sustained warm-pool run shows: when the pool first ran dry, how fast the keeper
made pods warm, what claims cost before and after; and the highest rate that held."""

from bench.claims import Claim, summarize_run, sustained_rate


def _run() -> list[Claim]:
    # Four warm claims, then the pool is empty from 2.0 s: two cold claims, one failure.
    return [
        Claim(0.0, 40.0, True),
        Claim(0.5, 60.0, True),
        Claim(1.0, 50.0, True),
        Claim(2.0, 1500.0, False),
        Claim(2.5, 80.0, True),
        Claim(3.0, 2500.0, False),
        Claim(3.5, None, False, "x: TimeoutError"),
    ]


def test_a_run_reports_when_the_pool_ran_dry_and_what_claims_cost_either_side() -> None:
    summary = summarize_run(_run(), warm_before=3, warm_after=1, seconds=4.0)

    assert summary["claims"] == 7
    assert (summary["warm"], summary["cold"], summary["failed"]) == (4, 2, 1)
    assert summary["first_dry_s"] == 2.0
    # 4 warm claims taken, the level fell from 3 to 1: 2 pods made warm in 4 s.
    assert summary["refill_per_s"] == 0.5
    assert summary["p50_before_dry"] == 50.0
    # After the pool first ran dry: the warm 80 ms one and the two cold ones.
    assert summary["p50_after_dry"] == 1500.0
    assert summary["p50"] == 70.0  # of the six that returned


def test_a_run_that_never_ran_dry_has_no_after() -> None:
    claims = [Claim(i * 1.0, 50.0 + i, True) for i in range(5)]

    summary = summarize_run(claims, warm_before=5, warm_after=5, seconds=5.0)

    assert summary["first_dry_s"] is None
    assert summary["p50_after_dry"] is None
    assert summary["refill_per_s"] == 1.0


def test_the_sustained_rate_is_the_highest_with_no_cold_claim_and_no_failure() -> None:
    held = summarize_run([Claim(0.0, 50.0, True)], warm_before=1, warm_after=1, seconds=1.0)
    dry = summarize_run(_run(), warm_before=3, warm_after=1, seconds=4.0)
    failed = summarize_run([Claim(0.0, None, True, "e")], warm_before=1, warm_after=1, seconds=1.0)

    assert sustained_rate([(1.0, held), (2.0, held), (5.0, dry)]) == 2.0
    assert sustained_rate([(1.0, failed), (2.0, dry)]) is None
