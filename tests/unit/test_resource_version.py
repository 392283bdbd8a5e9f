"""Comparing resourceVersions as Kubernetes 1.35 defines it (KEP-5504)."""

from __future__ import annotations

import pytest

from openblox.models.resource_version import is_older


@pytest.mark.parametrize(
    ("candidate", "current"),
    [("1", "2"), ("9", "10"), ("99999999999999999998", "99999999999999999999")],
)
def test_an_earlier_write_is_older(candidate: str, current: str) -> None:
    assert is_older(candidate, current)
    assert not is_older(current, candidate)
    assert not is_older(current, current)


@pytest.mark.parametrize(
    ("candidate", "current"),
    [
        ("", "2"),
        (None, "2"),
        ("1", None),
        ("01", "2"),  # a leading zero is not well-formed
        ("0", "2"),  # zero is the lists' "any version", never an object's
        ("1a", "2"),
        ("-1", "2"),
        ("\u0661", "2"),  # an Arabic-Indic one is a digit to Python, not to Kubernetes
    ],
)
def test_a_version_that_is_not_well_formed_compares_with_nothing(
    candidate: str | None, current: str | None
) -> None:
    assert not is_older(candidate, current)
    assert not is_older(current, candidate)
