"""Run one fuzzed surface for a fixed number of generated cases and count what happened.

The same function serves the bounded run in ``make test`` and the larger one behind
docs/fuzzing.md, so the figures are the tests' own, at a larger count. Hypothesis draws
the cases (seeded, no example database, no shrinking: the count is exactly the cases
run); each case's check returns how the input was handled ("accepted", or "refused: ..."
naming the error type) or raises Violation.
"""

from __future__ import annotations

import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from tests.fuzz.oracle import Violation


@dataclass(frozen=True)
class Surface:
    name: str
    what: str
    """One line for the figures: what is fed where."""
    cases: st.SearchStrategy[Any]
    check: Callable[[Any], str]


@dataclass
class Tally:
    surface: str
    cases: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)

    def count(self, kind: str) -> int:
        return sum(1 for v in self.violations if v.startswith(f"{kind}:"))


def run_surface(surface: Surface, examples: int, at_seed: int) -> Tally:
    """Exactly ``examples`` generated cases (fewer only if the strategy runs out)."""
    tally = Tally(surface.name)

    @settings(
        max_examples=examples,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @seed(at_seed)
    @given(surface.cases)
    def one(case: Any) -> None:
        tally.cases += 1
        try:
            tally.outcomes[surface.check(case)] += 1
        except Violation as violation:
            tally.violations.append(f"{violation.kind}: {violation.detail} <- {case!r:.300}")
        except Exception as error:
            where = traceback.format_exception(error)[-2].strip().splitlines()[0]
            tally.violations.append(
                f"crash: {type(error).__name__}: {error} ({where}) <- {case!r:.300}"
            )

    one()
    return tally
