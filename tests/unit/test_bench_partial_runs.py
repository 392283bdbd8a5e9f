"""A partial benchmark run keeps the sections it does not run, each with its own notes,
and leaves behind the notes the last run made about itself (an interruption)."""

from __future__ import annotations

from bench.results import Run, Section
from bench.runner import kept_sections, note_on_sections_run

INTERRUPTED = "the run was interrupted (SIGTERM); sections not marked ok are incomplete"


def _previous() -> dict[str, object]:
    return {
        "machine": {"cpu_model": "AMD EPYC", "nproc": 2, "kernel": "6.18"},
        "notes": [INTERRUPTED],
        "sections": {
            "create": {"name": "create", "title": "Create", "status": "ok", "notes": ["c"]},
            "pool": {
                "name": "pool",
                "title": "Pool",
                "status": "running",
                "notes": [INTERRUPTED],
            },
        },
    }


def test_a_partial_run_keeps_other_sections_and_their_notes_only() -> None:
    kept = kept_sections(_previous(), ["create"])
    assert list(kept) == ["pool"]
    assert kept["pool"].notes == [INTERRUPTED]
    assert kept["pool"].status == "running"
    assert kept["pool"].machine == "AMD EPYC, 2 cores, kernel 6.18"


def test_the_sections_run_again_are_not_kept() -> None:
    kept = kept_sections(_previous(), ["create", "pool"])
    assert kept == {}


def test_a_report_only_run_keeps_every_section() -> None:
    assert sorted(kept_sections(_previous(), [])) == ["create", "pool"]


def test_a_note_about_this_run_goes_on_the_sections_it_ran() -> None:
    run = Run(quick=False, machine={})
    run.sections["pool"] = Section("pool", "Pool")
    run.sections["create"] = Section("create", "Create")
    note_on_sections_run(run, ["pool", "memory"], INTERRUPTED)
    note_on_sections_run(run, ["pool"], INTERRUPTED)
    assert run.notes == [INTERRUPTED, INTERRUPTED]
    assert run.sections["pool"].notes == [INTERRUPTED]
    assert run.sections["create"].notes == []
