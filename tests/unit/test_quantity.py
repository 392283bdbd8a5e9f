from fractions import Fraction

import pytest

from openblox.models import parse_quantity


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", Fraction(1)),
        ("0.5", Fraction(1, 2)),
        (".5", Fraction(1, 2)),
        ("500m", Fraction(1, 2)),
        ("2k", Fraction(2000)),
        ("1M", Fraction(10**6)),
        ("1G", Fraction(10**9)),
        ("1E", Fraction(10**18)),
        ("1Ki", Fraction(1024)),
        ("512Mi", Fraction(512 * 1024**2)),
        ("1.5Gi", Fraction(3 * 2**29)),
        ("1e3", Fraction(1000)),
        ("1E3", Fraction(1000)),
        ("5e-1", Fraction(1, 2)),
        ("100n", Fraction(1, 10**7)),
        ("+3", Fraction(3)),
        ("-1", Fraction(-1)),
    ],
)
def test_parses_kubernetes_quantities_exactly(text: str, value: Fraction) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize(
    "text", ["", "Mi", "1 Mi", " 1", "1mi", "1K", "1KiB", "1e", "0x10", "1..2", "1,5", "one"]
)
def test_rejects_what_kubernetes_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="is not a Kubernetes quantity"):
        parse_quantity(text)


def test_refuses_exponents_too_large_to_expand_quickly() -> None:
    with pytest.raises(ValueError, match="out of range"):
        parse_quantity("1e999999999")
