"""The scorecard: property x target (backend/profile), each pass, fail or unsupported.

Written by every run as JSON (for machines and CI) and a Markdown table (for people).
A fail carries the evidence seen; an unsupported carries the backend's reason.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from openblox.conformance.properties import BY_ID, PROPERTIES, Category
from openblox.names import GROUP

SCHEMA = f"{GROUP}/conformance-scorecard/v1"
CELL_LIMIT = 300


class Status(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    UNSUPPORTED = "unsupported"


@dataclass(frozen=True)
class Result:
    id: str
    target: str
    status: Status
    evidence: str
    seconds: float = 0.0


@dataclass
class Target:
    name: str
    """``backend/profile``, the column heading."""
    backend: str
    profile: str
    notes: list[str] = field(default_factory=list)


@dataclass
class Scorecard:
    started: str
    targets: list[Target] = field(default_factory=list)
    results: list[Result] = field(default_factory=list)
    seconds: float = 0.0
    cluster: dict[str, Any] = field(default_factory=dict)

    def add(self, result: Result) -> None:
        self.results.append(result)

    def failures(self) -> list[Result]:
        return [r for r in self.results if r.status is Status.FAIL]

    def result(self, target: str, property_id: str) -> Result | None:
        return next((r for r in self.results if r.target == target and r.id == property_id), None)

    def summary(self) -> dict[str, dict[str, int]]:
        counts: dict[str, dict[str, int]] = {}
        for target in self.targets:
            mine = [r for r in self.results if r.target == target.name]
            counts[target.name] = {s.value: sum(r.status is s for r in mine) for s in Status}
        return counts

    # ------------------------------------------------------------------ JSON

    def to_json(self) -> dict[str, Any]:
        ids = {r.id for r in self.results}
        return {
            "schema": SCHEMA,
            "started": self.started,
            "seconds": round(self.seconds, 1),
            "cluster": self.cluster,
            "targets": [asdict(t) for t in self.targets],
            "summary": self.summary(),
            "properties": [
                {
                    "id": p.id,
                    "category": p.category.value,
                    "title": p.title,
                    "rationale": p.rationale,
                    "requires": p.requires.value if p.requires else None,
                }
                for p in PROPERTIES
                if p.id in ids
            ],
            "results": [
                {
                    "id": r.id,
                    "target": r.target,
                    "status": r.status.value,
                    "evidence": r.evidence,
                    "seconds": round(r.seconds, 2),
                }
                for r in self.results
            ],
        }

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> Scorecard:
        card = cls(
            started=str(document["started"]),
            seconds=float(document.get("seconds", 0)),
            cluster=dict(document.get("cluster") or {}),
        )
        card.targets = [Target(**t) for t in document["targets"]]
        card.results = [
            Result(r["id"], r["target"], Status(r["status"]), r["evidence"], r.get("seconds", 0))
            for r in document["results"]
        ]
        return card

    # ------------------------------------------------------------------ Markdown

    def to_markdown(self) -> str:
        names = [t.name for t in self.targets]
        lines = [
            "# openblox conformance scorecard",
            "",
            f"Run started {self.started}, took {self.seconds:.0f} s. "
            "Every property is probed from inside a running sandbox (or, for the control "
            "plane, as a second unprivileged identity). IDs and rationales: "
            "[README](README.md).",
            "",
        ]
        if self.cluster:
            lines += [
                "Cluster: " + ", ".join(f"{k} {v}" for k, v in sorted(self.cluster.items())),
                "",
            ]
        summary = self.summary()
        for target in self.targets:
            counts = summary[target.name]
            lines.append(
                f"- **{target.name}**: {counts['pass']} pass, {counts['fail']} fail, "
                f"{counts['unsupported']} unsupported"
            )
            lines.extend(f"  - {note}" for note in target.notes)
        lines.append("")
        seen = {r.id for r in self.results}
        for category in Category:
            rows = [p for p in PROPERTIES if p.category is category and p.id in seen]
            if not rows:
                continue
            lines += [f"## {category.value}", ""]
            lines.append("| ID | Property | " + " | ".join(names) + " |")
            lines.append("| --- | --- | " + " | ".join("---" for _ in names) + " |")
            for prop in rows:
                cells = []
                for name in names:
                    result = self.result(name, prop.id)
                    cells.append(_cell(result) if result else "not run")
                lines.append(f"| {prop.id} | {_escape(prop.title)} | " + " | ".join(cells) + " |")
            lines.append("")
        return "\n".join(lines)

    def write(self, directory: str | Path, stem: str) -> tuple[Path, Path]:
        folder = Path(directory)
        folder.mkdir(parents=True, exist_ok=True)
        json_path, md_path = folder / f"{stem}.json", folder / f"{stem}.md"
        json_path.write_text(json.dumps(self.to_json(), indent=2) + "\n")
        md_path.write_text(self.to_markdown() + "\n")
        return json_path, md_path


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _cell(result: Result) -> str:
    evidence = result.evidence
    if len(evidence) > CELL_LIMIT:
        evidence = evidence[: CELL_LIMIT - 1] + "…"
    label = {Status.PASS: "pass", Status.FAIL: "**FAIL**", Status.UNSUPPORTED: "unsupported"}
    return f"{label[result.status]}: {_escape(evidence)}"


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def merge(cards: Iterable[Scorecard]) -> Scorecard:
    cards = list(cards)
    merged = Scorecard(started=min(c.started for c in cards))
    for card in cards:
        merged.targets += card.targets
        merged.results += card.results
        merged.seconds += card.seconds
        merged.cluster.update(card.cluster)
    return merged


def known(property_id: str) -> bool:
    return property_id in BY_ID
