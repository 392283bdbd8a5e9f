"""The admission parameters: one line per profile, scope first, then the lifetime caps.

The policy that reads them (manifests/admission.yaml) is exercised on the real API
server by tests/cluster/test_operator.py; here, the lines it is given.
"""

from openblox.builders.admission import admission_entry, build_admission_configmap
from openblox.models import parse_profile
from tests.unit.factories import IMAGE_LINE


def test_an_unscoped_profile_allows_every_opted_in_namespace_and_carries_its_lifetime() -> None:
    profile = parse_profile(
        "code-exec",
        IMAGE_LINE + "lifetime: {idleTimeoutSeconds: 600, maxAgeSeconds: 1800}\n",
    )
    assert admission_entry(profile) == "* maxAgeSeconds:1800 idleTimeoutSeconds:600"


def test_a_scoped_profile_lists_names_and_labels_before_the_lifetime() -> None:
    profile = parse_profile(
        "team",
        IMAGE_LINE + "namespaces: {names: [b, a], selector: {matchLabels: {tier: gold}}}\n",
    )
    assert admission_entry(profile) == (
        "ns:a ns:b label:tier=gold maxAgeSeconds:3600 idleTimeoutSeconds:900"
    )


def test_the_configmap_holds_one_line_per_profile() -> None:
    profiles = {name: parse_profile(name, IMAGE_LINE) for name in ("b", "a")}
    data = build_admission_configmap(profiles)["data"]
    assert list(data) == ["a", "b"]
    assert data["a"] == "* maxAgeSeconds:3600 idleTimeoutSeconds:900"
