"""Each Sandbox's expiry, armed by its reconcile at the deadline it computed: the reaper's
loop reaps what is due instead of computing every Sandbox's expiry every pass.

The thread-safe shell of the pure `Timetable` (`openblox.lifetime.timetable`).
"""

from __future__ import annotations

import threading
from datetime import datetime

from openblox.lifetime.timetable import Timetable


class Deadlines:
    """Sandbox key -> the moment it expires; safe to use from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._table: Timetable[tuple[str, str]] = Timetable()

    def arm(self, key: tuple[str, str], at: datetime) -> None:
        with self._lock:
            self._table.arm(key, at)

    def disarm(self, key: tuple[str, str]) -> None:
        with self._lock:
            self._table.disarm(key)

    def pop_due(self, now: datetime) -> list[tuple[str, str]]:
        with self._lock:
            return self._table.pop_due(now)

    def get(self, key: tuple[str, str]) -> datetime | None:
        with self._lock:
            return self._table.get(key)

    def __len__(self) -> int:
        with self._lock:
            return len(self._table)
