"""Nodes lately found not to give a sandbox pod what it needs, and the Sandboxes waiting
because of it.

A pod whose probe finds its node unprepared (`models/node_preparation.py`) is deleted. Its
Sandbox then waits `HOLD_SECONDS` before the next pod, so a node that is never fixed
costs one pod per hold, not a loop of pods as fast as the kubelet starts them; and new
pods prefer other nodes for `AVOID_SECONDS`. Kept in memory: a replica that takes the
Lease learns it again from the next probe, at the cost of one more pod.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from openblox.controller import metrics

HOLD_SECONDS = 20.0
AVOID_SECONDS = 600.0

Key = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Hold:
    message: str
    until: datetime


def not_prepared(node: str, unmet: Iterable[str]) -> str:
    """What an Event and a condition say of it: the node, and each thing it lacked."""
    return f"node {node} is not prepared for sandboxes: {'; '.join(unmet)}"


class UnpreparedNodes:
    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._nodes: dict[str, datetime] = {}
        self._holds: dict[Key, Hold] = {}

    def report(self, node: str, key: Key | None, message: str, now: datetime) -> Hold:
        """`node` failed a pod just now; the Sandbox `key` (None: a pool pod) waits."""
        metrics.NODES_NOT_PREPARED.inc()
        hold = Hold(message, now + timedelta(seconds=HOLD_SECONDS))
        with self._guard:
            self._nodes[node] = now
            if key is not None:
                self._holds[key] = hold
        return hold

    def held(self, key: Key, now: datetime) -> Hold | None:
        """The Sandbox's hold while it lasts."""
        with self._guard:
            hold = self._holds.get(key)
            if hold is not None and hold.until <= now:
                del self._holds[key]
                return None
            return hold

    def avoided(self, now: datetime) -> frozenset[str]:
        """Nodes a new sandbox pod should not be put on, if another can take it."""
        horizon = now - timedelta(seconds=AVOID_SECONDS)
        with self._guard:
            for node in [node for node, seen in self._nodes.items() if seen <= horizon]:
                del self._nodes[node]
            return frozenset(self._nodes)

    def forget(self, key: Key) -> None:
        with self._guard:
            self._holds.pop(key, None)
