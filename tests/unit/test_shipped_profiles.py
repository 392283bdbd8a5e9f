"""The profiles this repository ships must parse: a typo there breaks `make up`."""

from pathlib import Path

import yaml

from openblox.models import parse_profiles

PROFILES_MANIFEST = Path(__file__).parents[2] / "manifests" / "profiles.yaml"


def test_every_shipped_profile_parses() -> None:
    configmap = yaml.safe_load(PROFILES_MANIFEST.read_text())

    profiles, broken = parse_profiles(configmap["data"])

    assert broken == {}
    assert "code-exec" in profiles
    assert all(profile.expected_boundary in ("gvisor", "kata") for profile in profiles.values())
