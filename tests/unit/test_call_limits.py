"""A call's timeout and output cap: the profile's by default, lower when asked, never more."""

from __future__ import annotations

import math

import pytest

from openblox.client.arguments import checked_limits
from openblox.client.errors import InvalidArgument

PROFILE = (60.0, 1 << 20)


def test_the_profiles_limits_apply_when_the_call_names_none() -> None:
    assert checked_limits(None, None, *PROFILE) == PROFILE


def test_a_call_may_lower_both() -> None:
    assert checked_limits(2, 0, *PROFILE) == (2.0, 0)
    assert checked_limits(0.5, 10, *PROFILE) == (0.5, 10)


@pytest.mark.parametrize(
    ("timeout", "output_limit", "message"),
    [
        (61, None, "above the profile's 60s"),
        (None, (1 << 20) + 1, "above the profile's"),
        (0, None, "positive number of seconds"),
        (-1, None, "positive number of seconds"),
        (math.nan, None, "positive number of seconds"),
        (math.inf, None, "positive number of seconds"),
        ("5", None, "positive number of seconds"),
        (None, -1, "whole number of bytes"),
        (None, 1.5, "whole number of bytes"),
        (None, True, "whole number of bytes"),
    ],
)
def test_nonsense_or_more_than_the_profile_is_refused_before_anything_runs(
    timeout: object, output_limit: object, message: str
) -> None:
    with pytest.raises(InvalidArgument, match=message):
        checked_limits(timeout, output_limit, *PROFILE)  # type: ignore[arg-type]
