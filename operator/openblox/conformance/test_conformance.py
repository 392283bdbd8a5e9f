"""Every property, against every profile named in OPENBLOX_CONFORMANCE_PROFILES.

A failing property fails its test with the evidence; a property whose tier the backend
declares unsupported is skipped with the backend's reason (the only skip there is).
"""

from __future__ import annotations

import pytest

from openblox.conformance.properties import Property, select
from openblox.conformance.runner import ConformanceRun
from openblox.conformance.scorecard import Status
from openblox.conformance.settings import Settings

_SETTINGS = Settings.from_environment()
_CASES = [(profile, prop) for profile in _SETTINGS.profiles for prop in select(_SETTINGS.only)]


@pytest.mark.parametrize(
    ("profile", "prop"),
    _CASES,
    ids=[f"{profile}:{prop.id}" for profile, prop in _CASES],
)
def test_property(conformance: ConformanceRun, profile: str, prop: Property) -> None:
    result = conformance.run(profile, prop)
    if result.status is Status.UNSUPPORTED:
        pytest.skip(f"unsupported by {conformance.backend.name}: {result.evidence}")
    assert result.status is Status.PASS, f"{prop.id} {prop.title}: {result.evidence}"
