"""The denial record: what sandboxed code tried, which policy stopped it, and how we know.

One versioned, documented shape (docs/denials.md, docs/denials.schema.json) for every
place a denial surfaces: `ExecResult.denials`, a Sandbox's `status.denials`, the message
of a `Denied` Event, and the `record` of a typed client error. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal, get_args

from openblox.timestamps import format_timestamp

SCHEMA: Final = "openblox.sh/denial/v1"
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

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "denied": self.denied,
            "attempted": _clip(self.attempted, MAX_ATTEMPTED),
            "because": _clip(self.because, MAX_BECAUSE),
            "profile": self.profile,
            "at": format_time(self.at),
            "evidence": _clip(self.evidence, MAX_EVIDENCE),
            "inferred": self.inferred,
        }


def _key(record: Mapping[str, Any]) -> tuple[Any, ...]:
    return (record.get("denied"), record.get("attempted"), record.get("at"), record.get("evidence"))


def merge_recent(
    existing: Iterable[Mapping[str, Any]],
    new: Sequence[Denial | Mapping[str, Any]],
    limit: int = STATUS_LIMIT,
) -> list[dict[str, Any]]:
    """`new` (in the order observed, oldest first) ahead of `existing`, so the list stays
    most recent first; at most `limit` records.

    Records are deterministic for one observation, so a fact seen twice (a dead pod read
    by two reconciles) is one record, and it keeps its place: an unchanged world gives
    an unchanged list, and no status patch.
    """
    kept = [dict(record) for record in existing]
    seen = {_key(record) for record in kept}
    added: list[dict[str, Any]] = []
    for item in new:
        record = item.to_dict() if isinstance(item, Denial) else dict(item)
        if _key(record) not in seen:
            seen.add(_key(record))
            added.append(record)
    return [*reversed(added), *kept][:limit]
