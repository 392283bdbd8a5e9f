"""The pool section's sustained runs: each claim rate at each pool size, the systems
taking turns run by run, and what held: the highest rate at which no claim found the
pool empty, per system and pool size."""

from __future__ import annotations

from typing import Any

from bench.claim_load import MAX_IN_FLIGHT
from bench.claims import sustained_rate
from bench.cluster_side import Kube
from bench.results import Section
from bench.sections import pool_runs
from bench.sections.pool_runs import Side


def run(
    ctx: Any,
    section: Section,
    sides: list[Side],
    *,
    sizes: tuple[int, ...],
    rates: tuple[float, ...],
    seconds: float,
    errors: list[str],
) -> None:
    """Each rate at each pool size, each system in turn; a table of all the runs."""
    kube: Kube = ctx.kube
    rows: list[list[Any]] = []
    held: dict[tuple[str, int], list[tuple[float, dict[str, Any]]]] = {}
    series: dict[str, list[list[float]]] = {}
    for size in sizes:
        for rate in rates:
            for side in sides:
                done = pool_runs.sustained(kube, side, size, rate, seconds)
                errors.extend(c.error for c in done.claims if c.error)
                pool_runs.record(
                    section,
                    side,
                    f"rate{rate:g}.pool{size}",
                    f"{rate:g} claim/s for {seconds:.0f} s, pool of {size}",
                    done.claims,
                    headline=rate == rates[0],
                    api_writes_per_claim=done.writes_per_claim,
                )
                held.setdefault((side.prefix, size), []).append((rate, done.summary))
                name = f"{rate:g}/s, pool of {size}"
                series[name if side.prefix == "pool" else f"{side.label}: {name}"] = [
                    [round(c.offset, 2), round(c.ms, 1)] for c in done.claims if c.ms is not None
                ]
                stopped = "-" if done.stopped is None else f"{done.stopped:.0f}"
                row = [side.label, f"{rate:g}/s", size, *_row(done.summary)]
                rows.append([*row, stopped, done.writes_per_claim])
                ctx.log(f"pool: {side.label} {rate:g}/s with pool {size} done: {done.summary}")
    for (prefix, size), runs in held.items():
        best = sustained_rate(runs)
        refill = max((s["refill_per_s"] or 0.0) for _, s in runs)
        label = "" if prefix == "pool" else "agent-sandbox: "
        section.figure(
            f"{prefix}.sustained.pool{size}",
            f"{label}highest rate tried with no claim finding the pool of {size} empty",
            "claims/s",
            value=best,
            higher_is_better=True,
            headline=True,
            notes=f"the pool was refilled at most {refill:.2f} pods/s in any run"
            + ("; the pool ran dry at every rate tried" if best is None else ""),
        )
    section.table(
        "Sustained claims, each deleted once Ready (systems alternating run by run)",
        [
            "system",
            "rate",
            "pool",
            "claims",
            "warm",
            "went cold",
            "failed",
            "pool first empty at (s)",
            "pods made warm / s",
            "p50 ms",
            "p95 ms",
            "p99 ms",
            "p50 / p99 ms while warm",
            "p50 / p99 ms once empty",
            f"stopped issuing at (s; {MAX_IN_FLIGHT} waiting)",
            "API writes / claim (whole run, refill and deletes included)",
        ],
        rows,
    )
    section.series["claims"] = {
        "title": "Claim create→Ready over each sustained run",
        "xlabel": "s since the run started",
        "ylabel": "ms",
        "lines": series,
        "styles": dict.fromkeys(series, "."),
        "logy": True,
    }


def _row(summary: dict[str, Any]) -> list[Any]:
    def pair(a: Any, b: Any) -> str:
        return "-" if a is None else f"{a:.0f} / {b:.0f}"

    return [
        summary["claims"],
        summary["warm"],
        summary["cold"],
        summary["failed"],
        summary["first_dry_s"] if summary["first_dry_s"] is not None else "never",
        summary["refill_per_s"],
        summary["p50"],
        summary["p95"],
        summary["p99"],
        pair(summary["p50_before_dry"], summary["p99_before_dry"]),
        pair(summary["p50_after_dry"], summary["p99_after_dry"]),
    ]
