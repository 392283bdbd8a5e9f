"""Warm-pool claims as the pool section records them, and what one sustained run shows:
how many found a warm pod, when the pool first ran dry, how fast it was refilled, and what
a claim cost before and after. Pure: no cluster, so it is unit-tested."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bench.stats import percentile


@dataclass(frozen=True)
class Claim:
    offset: float
    """Seconds from the start of its run to the create call."""
    ms: float | None
    """create→Ready, or None if the create failed."""
    warm: bool
    """It was handed a pool pod (a pool pod's name has a dot; a cold one's cannot)."""
    error: str = ""


def _p(values: Sequence[float], q: float) -> float | None:
    return round(percentile(values, q), 1) if values else None


def summarize_run(
    claims: Sequence[Claim], *, warm_before: int, warm_after: int, seconds: float
) -> dict[str, Any]:
    """One sustained run. `warm_before` and `warm_after` are the pool's warm pods when the
    run started and once its last claim returned, `seconds` the time between the two: the
    pods the keeper made warm meanwhile are the warm claims plus the rise in the level."""
    done = [c for c in claims if c.ms is not None]
    times = [c.ms for c in done if c.ms is not None]
    warm = [c for c in done if c.warm]
    cold = [c for c in done if not c.warm]
    first_dry = min((c.offset for c in cold), default=None)
    before_dry = [
        c.ms for c in warm if c.ms is not None and (first_dry is None or c.offset < first_dry)
    ]
    after_dry = [
        c.ms for c in done if c.ms is not None and first_dry is not None and c.offset >= first_dry
    ]
    refilled = len(warm) + warm_after - warm_before
    return {
        "claims": len(claims),
        "failed": len(claims) - len(done),
        "warm": len(warm),
        "cold": len(cold),
        "first_dry_s": round(first_dry, 1) if first_dry is not None else None,
        "refill_per_s": round(refilled / seconds, 2) if seconds > 0 else None,
        "p50": _p(times, 50),
        "p95": _p(times, 95),
        "p99": _p(times, 99),
        "p50_before_dry": _p(before_dry, 50),
        "p99_before_dry": _p(before_dry, 99),
        "p50_after_dry": _p(after_dry, 50),
        "p99_after_dry": _p(after_dry, 99),
    }


def sustained_rate(runs: Sequence[tuple[float, dict[str, Any]]]) -> float | None:
    """The highest rate at which no claim found the pool empty, from (rate, summary) pairs
    of one pool size; None if the pool ran dry at every rate tried."""
    held = [rate for rate, summary in runs if summary["cold"] == 0 and summary["failed"] == 0]
    return max(held, default=None)
