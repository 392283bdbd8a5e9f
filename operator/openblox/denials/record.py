"""The denial record: what sandboxed code tried, which policy stopped it, and how we know.

One versioned, documented shape (docs/denials.md, docs/denials.schema.json) for every
place a denial surfaces: `ExecResult.denials`, a Sandbox's `status.denials`, the message
of a `Denied` Event, and the `record` of a typed client error. Pure: no I/O.

Inside the Python code a denial is always a `Denial`; it becomes a dict (`to_dict`) only
where it leaves (a status patch, an Event message, JSON output) and is parsed back
(`from_dict`, strict) only where it comes in from the API server.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Literal, TypeGuard, get_args

from openblox.names import GROUP
from openblox.timestamps import format_timestamp, parse_timestamp

SCHEMA: Final = f"{GROUP}/denial/v1"
"""The value of every record's `schema` field; a change of fields means a new version."""

Category = Literal[
    "network",
    "filesystem",
    "memory",
    "processes",
    "disk",
    "time",
    "output",
    "privilege",
    "lifetime",
    "admission",
]
CATEGORIES: Final[tuple[Category, ...]] = get_args(Category)

# Bounds, so a record is always small enough for a status entry or an Event message.
MAX_EVIDENCE: Final = 300
MAX_ATTEMPTED: Final = 200
MAX_BECAUSE: Final = 300
STATUS_LIMIT: Final = 20
"""The CRD's maxItems for status.denials."""


format_time = format_timestamp  # the name this package has always exported


# The schema's `at`: UTC, to the second, with a `Z` (what `format_time` writes).
_AT = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")
# The string fields' shortest and longest lengths, as the schema bounds them.
_TEXT_BOUNDS: Final[dict[str, tuple[int, int | None]]] = {
    "attempted": (1, MAX_ATTEMPTED),
    "because": (1, MAX_BECAUSE),
    "profile": (0, None),
    "evidence": (0, MAX_EVIDENCE),
}
# The wire fields in the documented order; version 1 is closed, so no others.
FIELDS: Final = (
    "schema",
    "denied",
    "attempted",
    "because",
    "profile",
    "at",
    "evidence",
    "inferred",
)


def is_category(value: object) -> TypeGuard[Category]:
    return value in CATEGORIES


class InvalidDenial(ValueError):
    """A record that is not a version-1 denial (docs/denials.schema.json); says which field."""


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True, slots=True)
class Denial:
    """One policy the sandboxed code ran into.

    `inferred` is True when the only evidence is what the guest itself printed (an error
    message on stderr, an exit status), which code in the sandbox could forge; False when
    the signal comes from outside the guest's reach (the client's timeout or output cap,
    the kubelet's container status, the API server, the operator's clock).

    Read it by attribute (`denial.denied`); `to_dict` gives the wire record, for where it
    leaves the code. It is deliberately not also a mapping: one way to read a record.
    """

    denied: Category
    attempted: str
    because: str
    profile: str
    at: datetime
    evidence: str
    inferred: bool

    def __post_init__(self) -> None:
        if self.denied not in CATEGORIES:
            raise ValueError(f"unknown denial category {self.denied!r}")
        if self.at.tzinfo is None:
            raise ValueError("refusing a naive `at`: its time zone is unknown")
        # Bounded and to the second once, here, so the fields read the same as the record
        # sent (`denial.because == denial.to_dict()["because"]`) and a record parsed back
        # is equal (field by field: the dataclass's own equality and hash).
        # (object.__setattr__: the one way to normalise a frozen dataclass's fields.)
        object.__setattr__(self, "attempted", _clip(self.attempted, MAX_ATTEMPTED))
        object.__setattr__(self, "because", _clip(self.because, MAX_BECAUSE))
        object.__setattr__(self, "evidence", _clip(self.evidence, MAX_EVIDENCE))
        object.__setattr__(self, "at", self.at.astimezone(UTC).replace(microsecond=0))

    def to_dict(self) -> dict[str, Any]:
        """The wire record (docs/denials.schema.json), for a status, an Event, JSON output."""
        return {
            "schema": SCHEMA,
            "denied": self.denied,
            "attempted": self.attempted,
            "because": self.because,
            "profile": self.profile,
            "at": format_time(self.at),
            "evidence": self.evidence,
            "inferred": self.inferred,
        }

    @classmethod
    def from_dict(cls, record: object) -> Denial:
        """The record parsed strictly, as docs/denials.schema.json says it is; raises
        `InvalidDenial` naming the first field that is wrong."""
        if not isinstance(record, Mapping):
            raise InvalidDenial(f"a denial record is a JSON object, not {type(record).__name__}")
        unknown = sorted(str(key) for key in record if key not in FIELDS)
        if unknown:
            raise InvalidDenial(f"a denial record has no field {', '.join(unknown)}")
        missing = [key for key in FIELDS if key not in record]
        if missing:
            raise InvalidDenial(f"a denial record needs {', '.join(missing)}")
        if record["schema"] != SCHEMA:
            raise InvalidDenial(f"schema is {record['schema']!r}, not {SCHEMA!r}")
        denied = record["denied"]
        if not is_category(denied):
            raise InvalidDenial(f"denied is {denied!r}, not one of the categories")
        text: dict[str, str] = {}
        for key, (shortest, longest) in _TEXT_BOUNDS.items():
            value = record[key]
            if not isinstance(value, str):
                raise InvalidDenial(f"{key} is a {type(value).__name__}, not a string")
            if len(value) < shortest or (longest is not None and len(value) > longest):
                raise InvalidDenial(f"{key} has {len(value)} characters, outside the bounds")
            text[key] = value
        at = record["at"]
        if not isinstance(at, str) or not _AT.fullmatch(at):
            raise InvalidDenial(f"at is {at!r}, not an RFC 3339 UTC time to the second")
        inferred = record["inferred"]
        if not isinstance(inferred, bool):
            raise InvalidDenial(f"inferred is {inferred!r}, not a boolean")
        return cls(
            denied=denied,
            attempted=text["attempted"],
            because=text["because"],
            profile=text["profile"],
            at=parse_timestamp(at),
            evidence=text["evidence"],
            inferred=inferred,
        )


def _key(record: Mapping[str, Any]) -> tuple[Any, ...]:
    return (record.get("denied"), record.get("attempted"), record.get("at"), record.get("evidence"))


def merge_recent(
    existing: Iterable[Mapping[str, Any]],
    new: Sequence[Denial],
    limit: int = STATUS_LIMIT,
) -> list[dict[str, Any]]:
    """`new` (in the order observed, oldest first) ahead of `existing`, so the list stays
    most recent first; at most `limit` records, as the wire dicts the status holds.

    `existing` is the status as read, kept as it is (not parsed): a reconcile does not
    rewrite or drop what an earlier one wrote.

    Records are deterministic for one observation, so a fact seen twice (a dead pod read
    by two reconciles) is one record, and it keeps its place: an unchanged world gives
    an unchanged list, and no status patch.
    """
    kept = [dict(record) for record in existing]
    seen = {_key(record) for record in kept}
    added: list[dict[str, Any]] = []
    for denial in new:
        record = denial.to_dict()
        if _key(record) not in seen:
            seen.add(_key(record))
            added.append(record)
    return [*reversed(added), *kept][:limit]
