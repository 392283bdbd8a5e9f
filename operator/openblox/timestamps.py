"""RFC 3339 timestamps as the API server writes them (metav1.Time): the one parser.

Pure and standard-library only, so every layer may use it, the pure core included.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

_RFC3339 = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})",
)


def parse_timestamp(text: str) -> datetime:
    """An RFC 3339 timestamp as an aware datetime in UTC; raises ValueError for anything else.

    Normalised to UTC here, once: a valid stamp at the edge of the range with an offset
    (year 1 at +01:00, year 9999 at -01:00) names a moment no datetime can hold in UTC,
    and anything that later formats or compares it in UTC would overflow. Such a stamp
    is refused here instead, where every caller already handles a refusal.
    """
    if not isinstance(text, str) or not _RFC3339.fullmatch(text):
        raise ValueError(
            f'"{text[:64] if isinstance(text, str) else text!r}" is not an RFC 3339 timestamp'
        )
    try:
        return datetime.fromisoformat(text.upper()).astimezone(UTC)
    except OverflowError:
        raise ValueError(f'"{text}" is outside the range of representable UTC times') from None


def parse_optional_timestamp(value: object) -> datetime | None:
    """An aware datetime from a timestamp field that may be missing or malformed: None then.

    An aware datetime passes through; a naive one is taken as UTC (the API never writes one).
    """
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if not isinstance(value, str) or not value:
        return None
    try:
        return parse_timestamp(value)
    except ValueError:
        return None


def format_timestamp(moment: datetime) -> str:
    """RFC 3339 in UTC to the second, as the API server writes metav1.Time."""
    if moment.tzinfo is None:
        raise ValueError("refusing to format a naive datetime: its time zone is unknown")
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro_timestamp(moment: datetime) -> str:
    """RFC 3339 in UTC to the microsecond, as metav1.MicroTime (Events, Leases) wants."""
    if moment.tzinfo is None:
        raise ValueError("refusing to format a naive datetime: its time zone is unknown")
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
