"""Prometheus metrics the operator exports on --metrics-port."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

SANDBOXES = Gauge(
    "openblox_sandboxes",
    "Sandboxes known to the operator, by the reason of their Ready condition.",
    ["ready", "reason"],
)
CREATE_TO_READY = Histogram(
    "openblox_sandbox_create_to_ready_seconds",
    "From a Sandbox's creationTimestamp to the operator first seeing it Ready.",
    buckets=(0.5, 1, 2, 3, 5, 8, 13, 21, 34, 60, 120),
)
REAPED = Counter("openblox_sandboxes_reaped_total", "Sandboxes deleted by the reaper.", ["reason"])
RECONCILE_ERRORS = Counter(
    "openblox_reconcile_errors_total", "Reconciles that ended in an unexpected error."
)
RECONCILES = Counter("openblox_reconciles_total", "Reconciles run, by trigger.", ["trigger"])
