"""The benchmark report says which machine each section ran on, and drops a stale note
about missing plots once they are drawn."""

from __future__ import annotations

from pathlib import Path

from bench import report
from bench.results import Run, Section, machine_line

INTEL = {"cpu_model": "Intel Xeon", "nproc": 2, "kernel": "6.18-a"}
AMD = {"cpu_model": "AMD EPYC", "nproc": 2, "kernel": "6.18-b"}


def _run() -> Run:
    run = Run(quick=False, machine=AMD)
    for name, machine in (("create", INTEL), ("memory", AMD)):
        section = Section(name, name.title())
        section.status, section.machine = "ok", machine_line(machine)
        run.sections[name] = section
    return run


def test_sections_from_an_earlier_machine_are_named_as_such() -> None:
    text = report.markdown(_run())
    assert "`create`: ok, on Intel Xeon, 2 cores, kernel 6.18-a" in text
    assert "`memory`: ok, on AMD EPYC, 2 cores, kernel 6.18-b" in text
    assert "Sections `create` come from an earlier run on another machine" in text


def test_one_machine_needs_no_warning() -> None:
    run = _run()
    run.sections["create"].machine = machine_line(AMD)
    assert "earlier run on another machine" not in report.markdown(run)


def test_a_missing_plots_note_goes_once_plots_are_drawn(tmp_path: Path) -> None:
    run = _run()
    run.notes = [f"{report.PLOTS_MISSING}, so no plots were drawn", "kept"]
    report.write(run, tmp_path, plots=True)  # matplotlib is a bench extra, installed here
    assert run.notes == ["kept"]
    assert (tmp_path / "results.md").exists()


def test_a_series_with_marks_is_drawn_with_them(tmp_path: Path) -> None:
    drawn = {}
    for name, marks in (("plain", []), ("marked", [[1.5, "etcd"]])):
        run = _run()
        section = run.sections["memory"]
        section.series["latency"] = {
            "title": "claims",
            "lines": {"warm": [[1.0, 300.0], [2.0, 320.0]]},
            "marks": marks,
        }
        report.write(run, tmp_path / name, plots=True)
        assert section.plots == ["memory-latency.png"]
        drawn[name] = (tmp_path / name / "memory-latency.png").read_bytes()

    assert drawn["plain"] != drawn["marked"]
