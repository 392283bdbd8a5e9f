"""The denial classifier on real tools' failures (tests/unit/denial_transcripts): the
figures in docs/denials-accuracy.json and docs/denials.md are the ones the corpus gives."""

from __future__ import annotations

import json

from tests.denial_scoring import TRANSCRIPTS_KEY
from tests.unit.denial_transcripts.replay import ACCURACY, KINDS, ROOT, load, report

DENIALS_DOC = ROOT / "docs" / "denials.md"


def test_the_corpus_is_labelled_and_holds_each_kind() -> None:
    _, entries = load()
    assert len({e["id"] for e in entries}) == len(entries)
    for entry in entries:
        assert entry["kind"] in KINDS, entry["id"]
        assert entry["expect"] == ("none" if entry["kind"] == "lookalike" else "filesystem")
        assert entry["source"].startswith(("captured:", "quoted:")), entry["id"]
    counts = {kind: sum(1 for e in entries if e["kind"] == kind) for kind in KINDS}
    assert min(counts.values()) >= 20, counts


def test_the_accuracy_file_holds_what_the_corpus_gives() -> None:
    written = json.loads(ACCURACY.read_text())[TRANSCRIPTS_KEY]
    assert written == report(), (
        "docs/denials-accuracy.json is stale: "
        ".venv/bin/python -m tests.unit.denial_transcripts.replay --write"
    )


def test_no_false_denial_and_recall_of_at_least_095() -> None:
    figures = report()
    assert figures["overall"]["false_denials_on_ordinary"] == []
    assert figures["overall"]["precision"] == 1.0
    assert figures["overall"]["recall"] >= 0.95, figures["kinds"]


def test_the_document_quotes_the_measured_figures() -> None:
    figures = report()
    kinds, overall = figures["kinds"], figures["overall"]
    hits = sum(kinds[kind]["detected"] for kind in ("noexec", "library"))
    rows = [
        f"(`noexec`) | {kinds['noexec']['entries']} | {kinds['noexec']['detected']} | |",
        f"(`library`) | {kinds['library']['entries']} | {kinds['library']['detected']} | |",
        f"(`lookalike`) | {kinds['lookalike']['entries']} | | "
        f"{len(kinds['lookalike']['false_denials'])} |",
        f"| **transcripts overall** | **{figures['entries']}** | "
        f"**{hits}/{figures['policy_entries']}: recall {overall['recall']}, "
        f"precision {overall['precision']}** | **{len(overall['false_denials_on_ordinary'])}** |",
    ]
    document = DENIALS_DOC.read_text()
    assert [row for row in rows if row not in document] == []
