"""Kubernetes quantities (``500m``, ``512Mi``, ``1e3``): exact values, and a quantity as written."""

import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

_QUANTITY = re.compile(
    r"(?P<number>[+-]?(?:\d+(?:\.\d*)?|\.\d+))"
    # The exponent form comes first so that "1E3" is 1000 while a bare "1E" is one exa.
    r"(?P<suffix>[eE][+-]?\d+|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?"
)
_SUFFIX_MULTIPLIERS: Mapping[str, Fraction] = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}
# Kubernetes quantities fit in int64, so larger exponents are only ever typos (or attacks
# on the parser: 1e999999999 would take minutes to expand).
_MAX_EXPONENT = 18


def parse_quantity(text: str) -> Fraction:
    """The exact value of a Kubernetes quantity such as ``500m``, ``1.5``, ``512Mi`` or ``1e3``.

    Raises ValueError naming the text when it is not a quantity.
    """
    match = _QUANTITY.fullmatch(text)
    if match is None:
        raise ValueError(f'"{text}" is not a Kubernetes quantity (for example 500m, 2, 512Mi, 1Gi)')
    number = Fraction(Decimal(match["number"]))
    suffix = match["suffix"] or ""
    if suffix in _SUFFIX_MULTIPLIERS:
        return number * _SUFFIX_MULTIPLIERS[suffix]
    exponent = int(suffix[1:])
    if abs(exponent) > _MAX_EXPONENT:
        raise ValueError(f'"{text}" is out of range for a Kubernetes quantity')
    return number * Fraction(10) ** exponent


@dataclass(frozen=True, slots=True)
class Quantity:
    """A quantity as the admin wrote it (used verbatim in the pod) and its integer value."""

    text: str
    value: int
