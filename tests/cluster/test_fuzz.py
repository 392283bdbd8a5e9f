"""The bounded, seeded fuzz run against the real API server and operator (part of `make
test`; the larger run is `make fuzz`, docs/fuzzing.md). Generated Sandboxes are refused
with a clear 4xx or reconciled into a pod no weaker than the profile, and then reaped
together, whatever labels and annotations they carry; generated profile
entries are refused with a ProfileRefused Event while the others stay in service; and
the operator neither restarts nor stops serving."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from openblox.conformance.cluster_api import Kube as ApiKube
from tests.cluster.capacity import require_room, sandbox_node_selector, sandbox_requests
from tests.cluster.kubectl import Kube
from tests.fuzz import cluster
from tests.fuzz.runner import run_surface

pytestmark = pytest.mark.cluster

SEED = 20261201
SANDBOX_CASES = 40
PROFILE_CASES = 6


@pytest.fixture(scope="module")
def api(operator: Kube) -> ApiKube:
    return ApiKube.connect(operator.kubeconfig)


@pytest.fixture(scope="module")
def fuzz_namespace(operator: Kube, api: ApiKube) -> Iterator[cluster.FuzzNamespace]:
    logging.getLogger("kubernetes").setLevel(logging.WARNING)
    with cluster.FuzzNamespace(api).open() as namespace:
        # The accepted cases' pods stay until the reaper's pass at the end.
        require_room(
            operator,
            sandbox_requests(operator, cluster.FUZZ_PROFILE),
            SANDBOX_CASES // 3,
            "fuzz pods",
            node_selector=sandbox_node_selector(operator, cluster.FUZZ_PROFILE),
        )
        yield namespace


def test_generated_sandboxes_are_refused_clearly_or_never_weaker(
    api: ApiKube, fuzz_namespace: cluster.FuzzNamespace
) -> None:
    watch = cluster.Operator(api)
    surface = cluster.sandbox_surface(api, fuzz_namespace)
    tally = run_surface(surface, SANDBOX_CASES, SEED)
    assert isinstance(surface.check, cluster.SandboxSpecs)
    # Every accepted one, whatever it carries, reaped in one pass beside a witness.
    cluster.all_reaped(api, surface.check)
    cluster.still_serves(api, fuzz_namespace)
    assert tally.violations == []
    assert tally.cases == SANDBOX_CASES
    assert watch.crashes() == 0
    accepted = sum(n for k, n in tally.outcomes.items() if k.startswith("accepted"))
    assert accepted and accepted < tally.cases, tally.outcomes


def test_generated_profile_entries_are_refused_while_the_others_serve(
    api: ApiKube, fuzz_namespace: cluster.FuzzNamespace
) -> None:
    watch = cluster.Operator(api)
    tally = run_surface(cluster.profile_surface(api), PROFILE_CASES, SEED)
    cluster.still_serves(api, fuzz_namespace)
    assert tally.violations == []
    assert tally.outcomes["refused: ProfileRefused"] >= 1, tally.outcomes
    assert watch.crashes() == 0
