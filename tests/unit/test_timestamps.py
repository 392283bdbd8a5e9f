"""The one RFC 3339 parser: strict where a timestamp must be one, lenient where it may be absent."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from openblox.timestamps import (
    format_micro_timestamp,
    format_timestamp,
    parse_optional_timestamp,
    parse_timestamp,
)

MOMENT = datetime(2026, 12, 1, 23, 7, 5, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-12-01T23:07:05Z", MOMENT),
        ("2026-12-01t23:07:05z", MOMENT),
        ("2026-12-01T23:07:05.250000Z", MOMENT + timedelta(milliseconds=250)),
        ("2026-12-02T00:07:05+01:00", MOMENT),
    ],
)
def test_the_api_servers_forms_parse_to_aware_datetimes(text: str, expected: datetime) -> None:
    assert parse_timestamp(text) == expected
    assert parse_timestamp(text).tzinfo is not None


@pytest.mark.parametrize("text", ["2026-12-01", "2026-12-01T23:07:05", "yesterday", ""])
def test_anything_else_is_refused_by_the_strict_parser(text: str) -> None:
    with pytest.raises(ValueError, match="RFC 3339"):
        parse_timestamp(text)


def test_the_lenient_parser_says_none_for_what_is_missing_or_malformed() -> None:
    assert parse_optional_timestamp(None) is None
    assert parse_optional_timestamp("") is None
    assert parse_optional_timestamp("garbage") is None
    assert parse_optional_timestamp(12) is None
    assert parse_optional_timestamp("2026-12-01T23:07:05Z") == MOMENT
    assert parse_optional_timestamp(MOMENT.replace(tzinfo=None)) == MOMENT
    other_zone = MOMENT.astimezone(timezone(timedelta(hours=5)))
    assert parse_optional_timestamp(other_zone) is other_zone


def test_formatting_round_trips_and_refuses_a_naive_datetime() -> None:
    assert format_timestamp(MOMENT) == "2026-12-01T23:07:05Z"
    assert parse_timestamp(format_timestamp(MOMENT)) == MOMENT
    assert format_micro_timestamp(MOMENT) == "2026-12-01T23:07:05.000000Z"
    with pytest.raises(ValueError, match="naive"):
        format_timestamp(MOMENT.replace(tzinfo=None))
