"""API writes while something happens, from the API server's own counter
(`apiserver_request_total` on its /metrics) read before and after: the POST, PUT, PATCH
and DELETE requests it answered, by resource. The counter moves when a request is
answered, whoever sent it, so a window also holds what others wrote meanwhile (node and
controller heartbeats, another user's work); Leases, which are only heartbeats here, are
left out, and the count in a quiet window beside the measured one says how much of the
rest is background. Parsing and arithmetic are pure, so they are unit-tested."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

METRIC = "apiserver_request_total"
WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# Heartbeats (the kubelet's node Lease, the controllers' and the operator's election).
IGNORED_RESOURCES = frozenset({"leases"})
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_writes(text: str) -> dict[str, float]:
    """Write requests answered since the API server started, by `resource[/subresource]`
    (with the group where there is one: `sandboxclaims.extensions.agents.x-k8s.io`)."""
    return parse_requests(text, WRITE_VERBS)


def parse_requests(text: str, verbs: frozenset[str]) -> dict[str, float]:
    """Requests of these verbs answered since the API server started, as `parse_writes`."""
    counts: dict[str, float] = {}
    prefix = METRIC + "{"
    for line in text.splitlines():
        if not line.startswith(prefix):
            continue
        labels_text, _, value = line[len(prefix) :].rpartition("} ")
        labels = dict(_LABEL.findall(labels_text))
        if labels.get("verb") not in verbs or labels.get("resource") in IGNORED_RESOURCES:
            continue
        try:
            number = float(value)
        except ValueError:
            continue
        key = labels.get("resource", "")
        if labels.get("group"):
            key = f"{key}.{labels['group']}"
        if labels.get("subresource"):
            key = f"{key}/{labels['subresource']}"
        counts[key] = counts.get(key, 0.0) + number
    return counts


def delta(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """Writes between two readings, by resource, largest first; none below zero (an API
    server restart resets the counter: its writes then count from zero)."""
    moved = {
        key: after[key] - before.get(key, 0.0) if after[key] >= before.get(key, 0.0) else after[key]
        for key in after
    }
    return dict(sorted(((k, v) for k, v in moved.items() if v > 0), key=lambda kv: (-kv[1], kv[0])))


def per_claim(
    writes: Mapping[str, float],
    claims: int,
    *,
    seconds: float,
    background_per_s: float = 0.0,
) -> dict[str, Any]:
    """Writes per claim over a window of `seconds`, as counted and less the background
    rate measured in a quiet window beside it (never below zero)."""
    if claims <= 0:
        raise ValueError("writes per claim need at least one claim")
    total = sum(writes.values())
    background = background_per_s * max(seconds, 0.0)
    return {
        "writes": total,
        "per_claim": round(total / claims, 2),
        "background": round(background, 1),
        "per_claim_less_background": round(max(total - background, 0.0) / claims, 2),
        "by_resource": {key: round(value / claims, 2) for key, value in writes.items()},
    }
