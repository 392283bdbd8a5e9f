"""The exact pod for a fixed Sandbox and the default profile.

Any change to the pod spec shows up here as a diff a reviewer must read. After an
intended change, regenerate the golden file and review the diff:

    OPENBLOX_UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/test_pod_golden.py
"""

import json
import os
from pathlib import Path

from openblox.builders import build_pod
from openblox.builders.pod import build_pool_pod
from openblox.models.pool import Pool
from tests.unit.factories import default_profile, make_sandbox

GOLDEN = Path(__file__).parent / "golden" / "pod_code_exec.json"
POOL_GOLDEN = Path(__file__).parent / "golden" / "pool_pod_code_exec.json"


def test_pod_for_the_default_profile_matches_the_golden_file() -> None:
    pod = build_pod(make_sandbox(), default_profile())

    if os.environ.get("OPENBLOX_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(json.dumps(pod, indent=2) + "\n")

    assert pod == json.loads(GOLDEN.read_text())


def test_pool_pod_for_the_default_profile_matches_the_golden_file() -> None:
    pool = Pool("warm", "code-exec", ("team-a",), 3)
    pod = build_pool_pod(pool, "team-a", default_profile(), "abcde")

    if os.environ.get("OPENBLOX_UPDATE_GOLDEN") == "1":
        POOL_GOLDEN.write_text(json.dumps(pod, indent=2) + "\n")

    assert pod == json.loads(POOL_GOLDEN.read_text())
