"""results.json, results.md and the PNG plots, from one Run."""

from __future__ import annotations

import json
import math
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.results import Figure, Run, Section, machine_line


def fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float) and math.isnan(value):
        return "-"
    magnitude = abs(float(value))
    if magnitude >= 100:
        return f"{value:,.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def ratio(figure: Figure, other: Figure | None) -> float | None:
    if other is None or figure.center is None or not other.center:
        return None
    return figure.center / other.center


def _figure_row(figure: Figure, figures: dict[str, Figure]) -> list[str]:
    stats = figure.stats
    baseline = figures.get(figure.baseline or "")
    floor = figures.get(figure.floor or "")
    base_ratio = ratio(figure, baseline)
    floor_ratio = ratio(figure, floor)
    return [
        figure.title + (f" ({figure.notes})" if figure.notes else ""),
        figure.unit,
        str(stats.get("n", 0)),
        fmt(stats.get("p50", figure.value)),
        fmt(stats.get("p95")),
        fmt(stats.get("p99")),
        fmt(stats.get("mean")),
        f"{baseline.title}: {fmt(baseline.center)}" if baseline else "-",
        f"{base_ratio:.2f}x" if base_ratio is not None else "-",
        f"{floor.title}: {fmt(floor.center)}" if floor else "-",
        f"{floor_ratio:.2f}x" if floor_ratio is not None else "-",
    ]


def _table(columns: list[str], rows: list[list[Any]]) -> list[str]:
    def cell(value: Any) -> str:
        return fmt(value).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines.extend("| " + " | ".join(cell(v) for v in row) + " |" for row in rows)
    return lines


PLOTS_MISSING = "matplotlib is not installed in this environment"

FIGURE_COLUMNS = [
    "figure",
    "unit",
    "n",
    "p50 (or value)",
    "p95",
    "p99",
    "mean",
    "baseline (same run, p50)",
    "ratio",
    "physical floor (p50)",
    "x floor",
]


def markdown(run: Run) -> str:
    figures = run.figures()
    machine = run.machine
    lines = [
        "# Benchmark results",
        "",
        "Written by `make bench` (`python -m bench`); every figure sits beside its baseline, "
        "measured in the same run on the same machine. Ratios are figure / baseline at the "
        "median (p50); for rates (jobs/s, MB/s, execs/s) a ratio below 1 means slower. "
        "The physical floor is the cheapest way the same thing can happen on this node "
        "(e.g. `crictl exec` for exec, a bare runc pod for create).",
        "",
    ]
    if run.quick:
        lines += [
            "> **Quick mode (`--quick`)**: tiny iteration counts, a smoke test of the harness. "
            "These numbers are not benchmark results.",
            "",
        ]
    lines += [
        f"Run started {run.started}, finished {run.finished}, {fmt(run.seconds)} s.",
        "",
        "## Machine",
        "",
        *_table(
            ["", ""],
            [[key, value] for key, value in machine.items()],
        ),
        "",
        "Each section records the 1/5/15-minute load averages (`uptime`) before and after "
        "it; read figures from sections with high load with that in mind.",
        "",
    ]
    elsewhere = sorted(
        s.name
        for s in run.sections.values()
        if s.machine and s.machine != machine_line(run.machine)
    )
    if elsewhere:
        names = ", ".join(f"`{name}`" for name in elsewhere)
        lines += [
            f"This table is the machine of the latest (partial) run. Sections {names} come "
            "from an earlier run on another machine of the same kind, named beside each; "
            "compare ratios within a section, not raw figures across sections.",
            "",
        ]
    if run.notes:
        lines += ["Notes on the run:", "", *[f"- {note}" for note in run.notes], ""]

    headline = [f for f in figures.values() if f.extra.get("headline")]
    if headline:
        lines += [
            "## Headline figures",
            "",
            *_table(FIGURE_COLUMNS, [_figure_row(f, figures) for f in headline]),
            "",
        ]

    lines += ["## Sections", ""]
    lines += _table(
        ["section", "status", "seconds", "load before (1/5/15 min)", "load after"],
        [
            [
                s.name,
                s.status,
                s.seconds,
                " / ".join(f"{x:.2f}" for x in s.load_before) or "-",
                " / ".join(f"{x:.2f}" for x in s.load_after) or "-",
            ]
            for s in run.sections.values()
        ],
    )
    lines.append("")
    for section in run.sections.values():
        lines += _section_markdown(section, figures)
    return "\n".join(lines).rstrip() + "\n"


def _section_markdown(section: Section, figures: dict[str, Figure]) -> list[str]:
    lines = [f"## {section.title}", ""]
    load = (
        f"load {' / '.join(f'{x:.2f}' for x in section.load_before)} → "
        f"{' / '.join(f'{x:.2f}' for x in section.load_after)}"
        if section.load_before
        else "load not recorded"
    )
    lines += [
        f"`{section.name}`: {section.status}"
        + (f", {fmt(section.seconds)} s" if section.seconds is not None else "")
        + (f", started {section.started}" if section.started else "")
        + (f", on {section.machine}" if section.machine else "")
        + f"; {load}.",
        "",
    ]
    if section.figures:
        lines += _table(FIGURE_COLUMNS, [_figure_row(f, figures) for f in section.figures])
        lines.append("")
    for table in section.tables:
        lines += [f"**{table['title']}**", "", *_table(table["columns"], table["rows"]), ""]
    for plot in section.plots:
        lines += [f"![{plot}]({plot})", ""]
    if section.notes:
        lines += [*[f"- {note}" for note in section.notes], ""]
    if section.error:
        lines += [
            "<details><summary>error</summary>",
            "",
            "```",
            section.error.strip(),
            "```",
            "",
            "</details>",
            "",
        ]
    return lines


# --------------------------------------------------------------------------- plots


def draw_plots(run: Run, out: Path) -> str | None:
    """Draws every section's plots; returns why not if matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return (
            f"{PLOTS_MISSING}, so no plots were drawn "
            "(`make install` puts it in .venv with the bench extras; then run again)"
        )
    for section in run.sections.values():
        if section.status in ("not run",):
            continue
        drawn: list[str] = []
        groups: dict[str, list[Figure]] = defaultdict(list)
        for figure in section.figures:
            if figure.extra.get("group") and figure.samples:
                groups[figure.extra["group"]].append(figure)
        for group, members in groups.items():
            name = f"{section.name}-{group}.png"
            fig, axis = plt.subplots(figsize=(9, 0.6 * len(members) + 1.8))
            data = [m.samples for m in members]
            axis.boxplot(data, vert=False, whis=(5, 95), showfliers=False)
            for index, samples in enumerate(data, start=1):
                jitter = [index + 0.12 * math.sin(i * 2.4) for i in range(len(samples))]
                axis.scatter(samples, jitter, s=8, alpha=0.5)
            axis.set_yticks(range(1, len(members) + 1))
            axis.set_yticklabels([m.extra.get("label", m.title) for m in members], fontsize=8)
            axis.set_xlabel(members[0].unit + " (box: p25-p75, whiskers: p5-p95)")
            axis.set_title(members[0].extra.get("group_title", group), fontsize=10)
            if members[0].extra.get("log"):
                axis.set_xscale("log")
            axis.grid(axis="x", alpha=0.3)
            fig.tight_layout()
            fig.savefig(out / name, dpi=110)
            plt.close(fig)
            drawn.append(name)
        for key, spec in section.series.items():
            if not isinstance(spec, dict) or "lines" not in spec:
                continue
            name = f"{section.name}-{key}.png"
            fig, axis = plt.subplots(figsize=(8, 4.5))
            for label, points in spec["lines"].items():
                if not points:
                    continue
                xs = [p[0] for p in points]
                ys = [p[1] for p in points]
                style = spec.get("styles", {}).get(label, "o-")
                axis.plot(xs, ys, style, label=label, markersize=3 if "." in style else 5)
            for at, label in spec.get("marks", []):
                axis.axvline(at, color="grey", linestyle="--", linewidth=0.8)
                axis.annotate(
                    label,
                    (at, 1),
                    xycoords=("data", "axes fraction"),
                    rotation=90,
                    va="top",
                    ha="right",
                    fontsize=7,
                )
            axis.set_xlabel(spec.get("xlabel", ""))
            axis.set_ylabel(spec.get("ylabel", ""))
            axis.set_title(spec.get("title", key), fontsize=10)
            if spec.get("logy"):
                axis.set_yscale("log")
            axis.grid(alpha=0.3)
            axis.legend(fontsize=8)
            fig.tight_layout()
            fig.savefig(out / name, dpi=110)
            plt.close(fig)
            drawn.append(name)
        if drawn:
            section.plots = drawn
    return None


def write(run: Run, out: Path, *, plots: bool = True) -> None:
    out.mkdir(parents=True, exist_ok=True)
    if plots:
        problem = draw_plots(run, out)
        run.notes = [note for note in run.notes if not note.startswith(PLOTS_MISSING)]
        if problem:
            run.notes.append(problem)
            print(f"[bench] {problem}", file=sys.stderr)
    (out / "results.json").write_text(json.dumps(run.to_dict(), indent=1, default=str) + "\n")
    (out / "results.md").write_text(markdown(run))
