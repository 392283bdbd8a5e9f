"""Who may write: the pure decisions of the operator's one Lease-based election."""

from openblox.leadership.lease import (
    Decision,
    LeaseRecord,
    LeaseTiming,
    Sighting,
    decide,
    lease_spec,
    record_of,
    released_spec,
    sighted,
    unseen_by_earlier_holders,
)

__all__ = [
    "Decision",
    "LeaseRecord",
    "LeaseTiming",
    "Sighting",
    "decide",
    "lease_spec",
    "record_of",
    "released_spec",
    "sighted",
    "unseen_by_earlier_holders",
]
