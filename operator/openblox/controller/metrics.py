"""Prometheus metrics the operator exports on --metrics-port."""

from __future__ import annotations

import threading
from collections import Counter as Tally
from collections.abc import Iterable, Mapping

from prometheus_client import Counter, Gauge, Histogram

from openblox.models import Sandbox
from openblox.names import ConditionType

SANDBOXES = Gauge(
    "openblox_sandboxes",
    "Sandboxes known to the operator, by the status and reason of their Ready condition "
    '(ready="Unknown", reason="Pending" before the operator has written one).',
    ["ready", "reason"],
)
CREATE_TO_READY = Histogram(
    "openblox_sandbox_create_to_ready_seconds",
    "From a Sandbox's creationTimestamp to the operator first seeing it Ready.",
    buckets=(0.5, 1, 2, 3, 5, 8, 13, 21, 34, 60, 120),
)
REAPED = Counter("openblox_sandboxes_reaped_total", "Sandboxes deleted by the reaper.", ["reason"])
REAP_ERRORS = Counter(
    "openblox_reap_errors_total",
    "Sandboxes whose reaping failed in a pass (each is tried again; the pass goes on).",
)
NODES_NOT_PREPARED = Counter(
    "openblox_pods_on_unprepared_nodes_total",
    "Sandbox and pool pods deleted because their node did not give them what a sandbox needs.",
)
NODE_AGENTS_SILENT = Counter(
    "openblox_node_agents_silent_total",
    "Nodes whose ready label the operator took off because their agent's Lease lapsed.",
)
RECONCILE_ERRORS = Counter(
    "openblox_reconcile_errors_total", "Reconciles that ended in an unexpected error."
)
LEADER = Gauge(
    "openblox_leader", "1 while this replica holds the operator's Lease and may write, else 0."
)
WRITES = Counter(
    "openblox_api_writes_total",
    "Requests that change something, as the election's fence let them through (sent) or "
    "refused them (fenced). The Lease's own renewals are not counted.",
    ["outcome"],
)
RECONCILES = Counter("openblox_reconciles_total", "Reconciles run, by trigger.", ["trigger"])
RECONCILE_QUEUE = Gauge(
    "openblox_reconcile_queue",
    "Sandboxes waiting for a reconcile that a watch event asked for (each counted once).",
)

_gauge_lock = threading.Lock()
_gauge_labels: set[tuple[str, str]] = set()


def ready_of(conditions: Iterable[Mapping[str, object]]) -> tuple[str, str]:
    """(status, reason) of the Ready condition; ("Unknown", "Pending") when there is none."""
    for condition in conditions:
        if condition.get("type") == ConditionType.READY:
            return str(condition.get("status") or "Unknown"), str(condition.get("reason") or "")
    return "Unknown", "Pending"


def count_by_ready(sandboxes: Iterable[Sandbox]) -> dict[tuple[str, str], int]:
    """How many Sandboxes there are per (Ready status, Ready reason). Pure."""
    return dict(Tally(ready_of(sandbox.conditions) for sandbox in sandboxes))


def set_sandboxes(sandboxes: Iterable[Sandbox]) -> None:
    """Set the gauge; a (status, reason) pair that no Sandbox has any more reads 0."""
    counts = count_by_ready(sandboxes)
    with _gauge_lock:
        _gauge_labels.update(counts)
        for labels in _gauge_labels:
            SANDBOXES.labels(*labels).set(counts.get(labels, 0))
