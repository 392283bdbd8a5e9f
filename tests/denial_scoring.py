"""Precision and recall of the denial records against a labelled corpus, one way for both
corpora: the programs run on the cluster (tests/cluster/test_denials.py) and the real
tools' failures replayed through the classifier (tests/unit/test_denial_transcripts.py).
Both write their figures to docs/denials-accuracy.json, each to its own part of it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from openblox.denials import CATEGORIES, Denial

TRANSCRIPTS_KEY = "transcripts"
"""The part of docs/denials-accuracy.json that the replayed transcripts own; the cluster
run owns the rest."""


@dataclass(frozen=True)
class Scored:
    """One labelled entry and the records the caller got for it."""

    id: str
    expect: str
    records: tuple[Denial, ...]
    attempted: str | None = None
    """A substring the record's `attempted` should hold, where the entry names one."""

    @property
    def categories(self) -> set[str]:
        return {record.denied for record in self.records}


def _ratio(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def accuracy(scored: Sequence[Scored]) -> dict[str, Any]:
    """Per-category and overall precision and recall; `none` entries count as negatives.

    Precision counts a record of category C on any entry not labelled C as a false denial;
    recall counts an entry labelled C without a C record as a miss.
    """
    per: dict[str, dict[str, Any]] = {}
    for category in CATEGORIES:
        expected = [s for s in scored if s.expect == category]
        predicted = [s for s in scored if category in s.categories]
        hits = [s for s in expected if category in s.categories]
        per[category] = {
            "entries": len(expected),
            "true_positives": len(hits),
            "false_positives": len(predicted) - len(hits),
            "false_negatives": len(expected) - len(hits),
            "precision": _ratio(len(hits), len(predicted)),
            "recall": _ratio(len(hits), len(expected)),
            "missed": sorted(s.id for s in expected if category not in s.categories),
            "false": sorted(s.id for s in predicted if s.expect != category),
        }
    true_positives = sum(p["true_positives"] for p in per.values())
    predicted_total = sum(p["true_positives"] + p["false_positives"] for p in per.values())
    expected_total = sum(p["entries"] for p in per.values())
    ordinary = [s for s in scored if s.expect == "none"]
    with_attempted = [s for s in scored if s.attempted]
    attempted_hits = [
        s for s in with_attempted if any((s.attempted or "") in r.attempted for r in s.records)
    ]
    records = [r for s in scored for r in s.records]
    return {
        "entries": len(scored),
        "policy_entries": expected_total,
        "ordinary_entries": len(ordinary),
        "overall": {
            "precision": _ratio(true_positives, predicted_total),
            "recall": _ratio(true_positives, expected_total),
            "false_denials_on_ordinary": sorted(s.id for s in ordinary if s.records),
        },
        "attempted_extracted": {
            "checked": len(with_attempted),
            "matched": len(attempted_hits),
            "missed": sorted(s.id for s in with_attempted if s not in attempted_hits),
        },
        "inferred_share": {
            "records": len(records),
            "inferred": sum(1 for r in records if r.inferred),
            "not_inferred": sum(1 for r in records if not r.inferred),
        },
        "categories": per,
    }


def write_accuracy(path: Path, report: dict[str, Any], key: str | None = None) -> None:
    """Write `report` to the accuracy file: at `key`, or as the whole file but `key`s kept,
    so each corpus rewrites only its own figures."""
    current: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    if key is None:
        updated = {**report, **{k: current[k] for k in (TRANSCRIPTS_KEY,) if k in current}}
    else:
        updated = {**current, key: report}
    path.write_text(json.dumps(updated, indent=2, sort_keys=False, ensure_ascii=False) + "\n")
