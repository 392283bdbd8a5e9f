"""The chaos section's figures, table and plot, from what the traffic, the auditor and the
fault schedule saw. Keys as the issue names them: `chaos.claims`, `chaos.faults`,
`chaos.lost`, `chaos.handed_twice`, `chaos.orphans`, `chaos.unexplained_errors`, and more.
"""

from __future__ import annotations

import math
from typing import Any

from bench.chaos_records import (
    FAULT_BOUND_SECONDS,
    Fault,
    claim_latency,
    first_success_after,
    summary,
    tally,
)
from bench.results import Section

# A fault's window, when no claim came through whole after it, for splitting latencies.
FALLBACK_WINDOW_SECONDS = 60.0
AT_REST = (
    ("orphans", "pods whose Sandbox is gone"),
    ("leaked_pool_pods", "pool pods past its size, or owned by nothing"),
    ("stuck", "Sandboxes not Ready that give no reason"),
    ("overdue", "Sandboxes still there past their deadline"),
)


def _counts(section: Section, load: Any, faults: list[Fault], unfinished: list[str]) -> None:
    attempts = load.attempts
    for kind, title, unit in (
        ("claim", "claims attempted (failures by reason in extra)", "claims"),
        ("exec", "commands attempted (python3 -c 'print(6*7)')", "execs"),
        ("file", "file writes and reads attempted", "calls"),
        ("keeper", "keepers' refreshes that failed", "calls"),
    ):
        counted = tally(attempts, kind)
        key = "chaos.claims" if kind == "claim" else f"chaos.{kind}s"
        if kind == "claim":
            counted["skipped"] = len(load.skipped)
        section.figure(key, title, unit, value=counted["attempted"], **counted)
    section.figure(
        "chaos.faults",
        "faults injected",
        "faults",
        value=len(faults),
        kinds=[f.kind for f in faults],
        problems=[f"{f.kind}: {f.note}" for f in faults if f.note],
    )
    unexplained = [a for a in attempts if not a.ok and not a.explained]
    for key, title, found in (
        ("lost", "files gone or different while their pod lived", load.lost),
        ("handed_twice", "pods handed to more than one Sandbox", load.ledger.handed_twice()),
        ("undeleted", "Sandboxes the traffic could not delete within 90 s", load.undeleted),
        (
            "unexplained_errors",
            "failures no typed error explains",
            [f"{a.kind} at {a.started:.0f} s: {a.reason}" for a in unexplained],
        ),
        ("unfinished", "calls still running when the section stopped waiting", unfinished),
    ):
        section.figure(f"chaos.{key}", title, "count", value=len(found), which=found[:20])
    section.figure(
        "chaos.lost_with_pod", "files gone with a pod that was replaced", "files",
        value=load.lost_with_pod,
    )  # fmt: skip
    section.figure(
        "chaos.unverified", "files read back wrong whose pod could not be looked up then",
        "files", value=load.unverified,
    )  # fmt: skip


def _invariants(section: Section, load: Any, auditor: Any, rest: dict[str, list[str]]) -> None:
    ledger = load.ledger
    section.figure(
        "chaos.ready_without_one_pod",
        f"Sandboxes Ready without exactly one live pod for over {FAULT_BOUND_SECONDS:.0f} s",
        "Sandboxes",
        value=len(ledger.violations),
        which=sorted(ledger.violations.values())[:20],
        stretches=ledger.stretches,
        longest_s=round(ledger.longest, 1),
        audits=ledger.audits,
        audits_missed=auditor.missed,
    )
    settled = "audited" in rest
    for key, title in AT_REST:
        found = rest.get(key, [])
        section.figure(
            f"chaos.{key}",
            f"{title}, once the run came to rest",
            "count",
            value=len(found) if settled else None,
            which=found[:20],
            audited=settled,
        )
    late = auditor.late
    section.figure(
        "chaos.reaper_late",
        f"seconds past expiresAt until a reaped Sandbox was seen gone "
        f"(bound {FAULT_BOUND_SECONDS:.0f} s)",
        "s",
        sorted(late.values()),
        over_bound=sorted(n for n, s in late.items() if s > FAULT_BOUND_SECONDS),
    )


def _latency(section: Section, load: Any, faults: list[Fault]) -> dict[str, list[float]]:
    split = claim_latency(load.attempts, faults, FALLBACK_WINDOW_SECONDS)
    for pod in ("warm", "cold"):
        section.figure(
            f"chaos.claim.{pod}.quiet",
            f"{pod} claim create→Ready, outside faults",
            "ms",
            split[f"{pod}.quiet"],
            group="claims",
            label=f"{pod}, quiet",
        )
        section.figure(
            f"chaos.claim.{pod}.faults",
            f"{pod} claim create→Ready, from a fault until a claim came through whole",
            "ms",
            split[f"{pod}.faults"],
            baseline=f"chaos.claim.{pod}.quiet",
            group="claims",
            label=f"{pod}, during faults",
        )
    return split


def _faults(section: Section, load: Any, faults: list[Fault]) -> None:
    cycles = [(c.started, c.finished, c.whole) for c in load.cycles]
    rows = []
    for fault in faults:
        after = first_success_after(fault.injected, cycles)
        fault.recovered = None if math.isnan(after) else after
        checked = None if fault.healthy is None else round(fault.healthy - fault.injected, 1)
        whole = None if fault.recovered is None else round(fault.recovered - fault.injected, 1)
        lo, hi = fault.window(FALLBACK_WINDOW_SECONDS)
        failed = [a for a in load.attempts if not a.ok and lo <= a.started <= hi]
        skipped = [t for t in load.skipped if lo <= t <= hi]
        reasons = sorted({a.reason for a in failed})
        rows.append(
            [fault.kind, round(fault.injected), checked, whole, len(failed), len(skipped),
             "; ".join(reasons)[:300], fault.note]
        )  # fmt: skip
        section.figure(
            f"chaos.recovery.{fault.kind}",
            f"{fault.kind}: injected → a claim cycle started after it came through whole",
            "s",
            value=whole,
            check_passed_s=checked,
        )
    section.table(
        "Faults: when each was injected; when its check passed; when a claim cycle started "
        "after it came through whole; calls failed and claims skipped meanwhile",
        [
            "fault",
            "at s",
            "check passed s",
            "whole cycle s",
            "failed",
            "skipped",
            "reasons",
            "note",
        ],
        rows,
    )


def _plot(section: Section, load: Any, faults: list[Fault]) -> None:
    claims = [a for a in load.attempts if a.kind == "claim"]

    def points(keep: Any) -> list[list[float]]:
        return [[round(a.started, 1), max(1, round(a.seconds * 1000))] for a in claims if keep(a)]

    section.series["latency"] = {
        "title": "Claim create→Ready over the run (failed: time until it failed); faults marked",
        "xlabel": "seconds from the start of the traffic",
        "ylabel": "ms",
        "logy": True,
        "lines": {
            "warm claim": points(lambda a: a.ok and a.warm),
            "cold claim": points(lambda a: a.ok and not a.warm),
            "failed claim": points(lambda a: not a.ok),
        },
        "styles": {"warm claim": "g.", "cold claim": "b.", "failed claim": "rx"},
        "marks": [[round(f.injected, 1), f.kind] for f in faults],
    }


def record(
    section: Section,
    load: Any,
    *,
    auditor: Any,
    faults: list[Fault],
    rest: dict[str, list[str]],
    unfinished: list[str],
    setting: str,
) -> None:
    """Every figure of the run into `section`; `setting` says what the traffic was."""
    _counts(section, load, faults, unfinished)
    _invariants(section, load, auditor, rest)
    split = _latency(section, load, faults)
    _faults(section, load, faults)
    _plot(section, load, faults)
    section.notes.append(
        f"{setting} Claims: "
        + "; ".join(f"{key} {summary(values)}" for key, values in split.items())
        + "."
    )
