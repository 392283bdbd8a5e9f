"""The transcript corpus replayed through the classifier, as the client calls it, and scored.

    .venv/bin/python -m tests.unit.denial_transcripts.replay          # print the figures
    .venv/bin/python -m tests.unit.denial_transcripts.replay --write  # and write them

The figures go to the `transcripts` part of docs/denials-accuracy.json.
tests/unit/test_denial_transcripts.py checks that the file holds what this computes, so
they are always measured, never typed in. Pure: no cluster, no clock in the figures.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from openblox.denials import ExecOutcome, Policy, classify_exec
from tests.denial_scoring import TRANSCRIPTS_KEY, Scored, accuracy, write_accuracy

ROOT = Path(__file__).resolve().parents[3]
TRANSCRIPTS = Path(__file__).parent / "transcripts.yaml"
ACCURACY = ROOT / "docs" / "denials-accuracy.json"
KINDS = ("noexec", "library", "lookalike")
# The code-exec profile as the client knows it after an exec (status.execLimits).
POLICY = Policy(profile="code-exec", processes=256)
WHEN = datetime(2026, 12, 1, tzinfo=UTC)


def load() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    document = yaml.safe_load(TRANSCRIPTS.read_text())
    return document["captured"], document["entries"]


def outcome(entry: dict[str, Any]) -> ExecOutcome:
    """The exec as the client sees it: the supervisor reports the exit, no signal."""
    return ExecOutcome(
        stdout=entry["stdout"].encode(),
        stderr=entry["stderr"].encode(),
        exit_code=entry["exit_code"],
        timed_out=False,
        truncated=False,
        timeout=60,
        output_limit=1 << 20,
        signal=0,
        argv=tuple(entry["argv"]),
        cwd=entry["cwd"],
    )


def replayed(entry: dict[str, Any]) -> Scored:
    """The records the client would give: it reads the mounts (which say whether scratch
    is noexec, as the entry was captured) only when the outcome may be a refused exec."""
    seen = outcome(entry)
    policy = POLICY
    if seen.may_be_refused_exec():
        policy = replace(policy, scratch_noexec=bool(entry["noexec"]))
    records = tuple(classify_exec(seen, policy, WHEN))
    return Scored(entry["id"], entry["expect"], records, entry.get("attempted"))


def _by_kind(entries: list[dict[str, Any]], scored: list[Scored]) -> dict[str, Any]:
    kinds: dict[str, Any] = {}
    for kind in KINDS:
        pairs = [(e, s) for e, s in zip(entries, scored, strict=True) if e["kind"] == kind]
        if kind == "lookalike":
            kinds[kind] = {
                "entries": len(pairs),
                "false_denials": sorted(s.id for _, s in pairs if s.records),
            }
            continue
        detected = [s for _, s in pairs if s.expect in s.categories]
        kinds[kind] = {
            "entries": len(pairs),
            "detected": len(detected),
            "recall": round(len(detected) / len(pairs), 4) if pairs else None,
            "missed": sorted(s.id for _, s in pairs if s not in detected),
        }
    return kinds


def report() -> dict[str, Any]:
    captured, entries = load()
    scored = [replayed(entry) for entry in entries]
    figures = accuracy(scored)
    return {
        "corpus": str(TRANSCRIPTS.relative_to(ROOT)),
        "captured": captured,
        "replayed_through": "openblox.denials.classify_exec, as the client calls it (code-exec)",
        **figures,
        "kinds": _by_kind(entries, scored),
        "held_out": _by_kind(
            [e for e in entries if e.get("held_out")],
            [s for e, s in zip(entries, scored, strict=True) if e.get("held_out")],
        ),
    }


def main(argv: list[str]) -> int:
    figures = report()
    print(json.dumps({k: figures[k] for k in ("overall", "kinds", "held_out")}, indent=2))
    if "--write" in argv:
        write_accuracy(ACCURACY, figures, TRANSCRIPTS_KEY)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
