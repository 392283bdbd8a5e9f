"""What a run records: figures (samples and their summaries), their baselines, floors, notes."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from bench import env
from bench.stats import summarize


@dataclass
class Figure:
    key: str
    """Unique across the run, e.g. create.seq.sandbox; baselines and floors refer to it."""
    title: str
    unit: str
    samples: list[float] = field(default_factory=list)
    value: float | None = None
    """A single measured value, for figures that are not a distribution."""
    baseline: str | None = None
    floor: str | None = None
    higher_is_better: bool = False
    notes: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def stats(self) -> dict[str, Any]:
        return (
            summarize(self.samples) if self.samples else {"n": 1 if self.value is not None else 0}
        )

    @property
    def center(self) -> float | None:
        """p50 of the samples, or the single value."""
        if self.samples:
            return float(self.stats["p50"])
        return self.value

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["stats"] = self.stats
        data["center"] = self.center
        return data


@dataclass
class Section:
    name: str
    title: str
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    tables: list[dict[str, Any]] = field(default_factory=list)
    plots: list[str] = field(default_factory=list)
    series: dict[str, Any] = field(default_factory=dict)
    """Raw data for plots that are not a single distribution (scaling curves)."""
    status: str = "not run"
    error: str | None = None
    started: str | None = None
    seconds: float | None = None
    load_before: list[float] = field(default_factory=list)
    load_after: list[float] = field(default_factory=list)
    machine: str | None = None
    """Where the section ran (`machine_line`): a partial run keeps older sections."""

    def figure(
        self,
        key: str,
        title: str,
        unit: str,
        samples: Sequence[float] = (),
        *,
        value: float | None = None,
        baseline: str | None = None,
        floor: str | None = None,
        higher_is_better: bool = False,
        notes: str = "",
        **extra: Any,
    ) -> Figure:
        figure = Figure(
            key,
            title,
            unit,
            [float(s) for s in samples],
            value,
            baseline,
            floor,
            higher_is_better,
            notes,
            dict(extra),
        )
        self.figures = [f for f in self.figures if f.key != key] + [figure]
        return figure

    def table(self, title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        self.tables.append(
            {"title": title, "columns": list(columns), "rows": [list(r) for r in rows]}
        )

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["figures"] = [f.to_dict() for f in self.figures]
        return data


@dataclass
class Run:
    quick: bool
    machine: dict[str, Any]
    started: str = field(default_factory=env.now_iso)
    finished: str | None = None
    seconds: float | None = None
    sections: dict[str, Section] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    t0: float = field(default_factory=time.monotonic)

    def figures(self) -> dict[str, Figure]:
        return {f.key: f for s in self.sections.values() for f in s.figures}

    def to_dict(self) -> dict[str, Any]:
        return {
            "quick": self.quick,
            "machine": self.machine,
            "started": self.started,
            "finished": self.finished,
            "seconds": self.seconds,
            "notes": self.notes,
            "sections": {name: s.to_dict() for name, s in self.sections.items()},
        }


def machine_line(machine: dict[str, Any]) -> str:
    """The machine in one line, to stand beside each section's figures."""
    return (
        f"{machine.get('cpu_model') or 'unknown CPU'}, {machine.get('nproc')} cores, "
        f"kernel {machine.get('kernel')}"
    )
