"""The exact pod for a fixed Sandbox and the default profile, and for the shipped code-exec.

Any change to the pod spec shows up here as a diff a reviewer must read. After an
intended change, regenerate the golden files and review the diff:

    OPENBLOX_UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/test_pod_golden.py
"""

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from openblox.builders import build_pod
from openblox.builders.pod import build_pool_pod
from openblox.models import Profile, parse_profile
from openblox.models.pool import Pool
from tests.unit.factories import CREATED, default_profile, make_sandbox

GOLDEN = Path(__file__).parent / "golden"
POOL_GOLDEN = GOLDEN / "pool_pod_code_exec.json"
PROFILES_MANIFEST = Path(__file__).parents[2] / "manifests" / "profiles.yaml"


def shipped_code_exec() -> Profile:
    data = yaml.safe_load(PROFILES_MANIFEST.read_text())["data"]
    return parse_profile("code-exec", data["code-exec"])


@pytest.mark.parametrize(
    ("golden", "profile"),
    [
        # Every field at its default: requests equal limits (Guaranteed).
        ("pod_code_exec.json", default_profile),
        # As manifests/profiles.yaml ships it: CPU requested below its limit (Burstable).
        ("pod_code_exec_shipped.json", shipped_code_exec),
    ],
)
def test_pod_matches_the_golden_file(golden: str, profile: Callable[[], Profile]) -> None:
    pod = build_pod(make_sandbox(), profile(), now=CREATED)
    path = GOLDEN / golden

    if os.environ.get("OPENBLOX_UPDATE_GOLDEN") == "1":
        path.write_text(json.dumps(pod, indent=2) + "\n")

    assert pod == json.loads(path.read_text())


def test_pool_pod_for_the_default_profile_matches_the_golden_file() -> None:
    pool = Pool("warm", "code-exec", ("team-a",), 3)
    pod = build_pool_pod(pool, "team-a", default_profile(), "abcde")

    if os.environ.get("OPENBLOX_UPDATE_GOLDEN") == "1":
        POOL_GOLDEN.write_text(json.dumps(pod, indent=2) + "\n")

    assert pod == json.loads(POOL_GOLDEN.read_text())
