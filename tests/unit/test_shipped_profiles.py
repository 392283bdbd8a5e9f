"""The profiles this repository ships must parse: a typo there breaks `make up`."""

from pathlib import Path
from typing import Any

import yaml

from openblox.models import parse_profiles, parse_quantity

REPO = Path(__file__).parents[2]
PROFILES_MANIFEST = REPO / "manifests" / "profiles.yaml"
# What the issue asks of the shipped code-exec on the embedded 2-core node.
NODE_MILLICORES = 2000
IDLE_SANDBOXES = 20


def _documents(path: Path) -> list[dict[str, Any]]:
    return [document for document in yaml.safe_load_all(path.read_text()) if document]


def _millicores(text: str) -> int:
    return int(parse_quantity(str(text)) * 1000)


def test_every_shipped_profile_parses() -> None:
    configmap = yaml.safe_load(PROFILES_MANIFEST.read_text())

    profiles, broken = parse_profiles(configmap["data"])

    assert broken == {}
    assert "code-exec" in profiles
    assert all(profile.expected_boundary in ("gvisor", "kata") for profile in profiles.values())


def test_twenty_code_exec_sandboxes_fit_beside_openblox_on_two_cores() -> None:
    """The scheduler's sum, from the shipped manifests: sandbox requests plus the gVisor
    RuntimeClass overhead, plus the operator's and the preview proxy's requests. The
    cluster test shows the same twenty Ready on the real node."""
    profile = parse_profiles(yaml.safe_load(PROFILES_MANIFEST.read_text())["data"])[0]["code-exec"]
    (runtime_class,) = _documents(REPO / "runtimeclasses" / "gvisor.yaml")
    overhead = _millicores(runtime_class["overhead"]["podFixed"]["cpu"])
    control_plane = 0
    for manifest in ("operator.yaml", "preview.yaml"):
        for document in _documents(REPO / "manifests" / manifest):
            if document["kind"] == "Deployment":
                for each in document["spec"]["template"]["spec"]["containers"]:
                    control_plane += _millicores(each["resources"]["requests"]["cpu"])

    per_sandbox = profile.resources.effective_cpu_request.value + overhead

    assert profile.resources.cpu.value > profile.resources.effective_cpu_request.value
    assert IDLE_SANDBOXES * per_sandbox + control_plane <= NODE_MILLICORES
