"""Legible denials: when sandboxed code hits a policy, a machine-readable record of it.

Pure (no I/O, no cluster client): the client classifies each exec's outcome, the
operator builds records for what it sees outside a call (an OOM-killed pod, a reaped
sandbox), and both use the one record shape. See docs/denials.md.
"""

from openblox.denials.classify import classify_exec
from openblox.denials.observed import admission_denial, lifetime_denial, pod_denial
from openblox.denials.outcome import ExecOutcome, Policy, scratch_mounted_noexec
from openblox.denials.record import (
    CATEGORIES,
    SCHEMA,
    STATUS_LIMIT,
    Category,
    Denial,
    InvalidDenial,
    format_time,
    merge_recent,
)

__all__ = [
    "CATEGORIES",
    "SCHEMA",
    "STATUS_LIMIT",
    "Category",
    "Denial",
    "ExecOutcome",
    "InvalidDenial",
    "Policy",
    "admission_denial",
    "classify_exec",
    "format_time",
    "lifetime_denial",
    "merge_recent",
    "pod_denial",
    "scratch_mounted_noexec",
]
