"""The conformance Job on the kind cluster, as a user of kind runs it: `conformance/run.sh`
with KUBECONFIG at the cluster. Every property of the shipped profile passes there, and
what run.sh prints is one JSON document (the Job's log mixes stdout and stderr).

With OPENBLOX_SCORECARD_DIR set, the scorecard is also written there as
kind-operator-code-exec.{json,md} (how docs/conformance/ gets its kind scorecard).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from openblox.conformance.scorecard import Scorecard, Status
from tests.cluster.kubectl import Kube
from tests.kind.conftest import REPO

pytestmark = pytest.mark.kind

RUN_SH = REPO / "conformance" / "run.sh"


def test_the_conformance_job_passes_every_property_on_kind(
    kind_operator: Kube, tmp_path: Path
) -> None:
    ran = subprocess.run(
        [str(RUN_SH)],
        env={**os.environ, "KUBECONFIG": kind_operator.kubeconfig},
        capture_output=True,
        text=True,
        timeout=2400,
        check=False,
    )

    assert ran.returncode in (0, 1), ran.stderr[-3000:]
    card = Scorecard.from_json(json.loads(ran.stdout))
    out = Path(os.environ.get("OPENBLOX_SCORECARD_DIR") or tmp_path)
    card.write(out, "kind-operator-code-exec")
    failed = [f"{r.id}: {r.evidence}" for r in card.failures()]
    assert not failed, "\n".join(failed)
    [counts] = card.summary().values()
    assert counts[Status.FAIL.value] == 0 and counts[Status.UNSUPPORTED.value] == 0, counts
    assert counts[Status.PASS.value] == len(card.results) >= 55, counts
