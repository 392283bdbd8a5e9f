"""The bounded, seeded fuzz run of every surface that needs no cluster (part of `make
test`). The larger run behind docs/fuzzing.md is the same code at a larger count:
`make fuzz`. Every case must be accepted whole or refused with a clear error, and
nothing accepted may build a pod weaker than its profile."""

from __future__ import annotations

import logging

import pytest

from tests.fuzz import edges, pure, tenant
from tests.fuzz.runner import Surface, run_surface

SEED = 20261201
BOUNDED = {
    pure.PROFILE.name: 100,
    pure.SANDBOX_CORE.name: 150,
    pure.FRAMING.name: 200,
    pure.SUPERVISOR.name: 20,
    pure.TOKENS_SURFACE.name: 200,
    edges.PREVIEW_REQUESTS.name: 100,
    edges.CLIENT_ARGS.name: 200,
    edges.CLI.name: 60,
    tenant.TENANT_METADATA.name: 200,
}
SURFACES = [*pure.SURFACES, *edges.SURFACES, *tenant.SURFACES]


@pytest.mark.parametrize("surface", SURFACES, ids=[s.name for s in SURFACES])
def test_no_case_crashes_weakens_or_is_refused_unclearly(surface: Surface) -> None:
    logging.disable(logging.CRITICAL)  # the preview proxy logs every refusal
    try:
        tally = run_surface(surface, BOUNDED[surface.name], SEED)
    finally:
        logging.disable(logging.NOTSET)
    assert tally.cases == BOUNDED[surface.name]
    assert tally.violations == []
    # A strategy that only ever hits one branch would prove little (the supervisor's
    # 20 cases, each a process, are too few to promise a truncated one).
    if surface is not pure.SUPERVISOR:
        assert len(tally.outcomes) >= 2, tally.outcomes


def test_every_surface_has_a_bounded_count() -> None:
    assert set(BOUNDED) == {s.name for s in SURFACES}
