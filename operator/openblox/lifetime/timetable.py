"""A timetable of deadlines by key: each Sandbox is armed at its own expiry, so a pass
looks only at what is due instead of computing every Sandbox's expiry every second.

Pure (no clock, no lock): the caller passes `now` and serialises access.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable
from datetime import datetime
from typing import Generic, TypeVar

Key = TypeVar("Key", bound=Hashable)


class Timetable(Generic[Key]):
    def __init__(self) -> None:
        self._at: dict[Key, datetime] = {}
        # (deadline, sequence, key); entries whose deadline is no longer the key's are
        # stale and skipped when they reach the top, so re-arming costs O(log n).
        self._heap: list[tuple[datetime, int, Key]] = []
        self._sequence = 0

    def arm(self, key: Key, at: datetime) -> None:
        """Due at `at`; replaces an earlier arming (activity moves the idle deadline on)."""
        if self._at.get(key) == at:
            return
        self._at[key] = at
        self._sequence += 1
        heapq.heappush(self._heap, (at, self._sequence, key))
        if len(self._heap) > 2 * len(self._at) + 64:
            self._compact()

    def disarm(self, key: Key) -> None:
        self._at.pop(key, None)

    def pop_due(self, now: datetime) -> list[Key]:
        """The keys due at `now`, each once; they are disarmed."""
        due: list[Key] = []
        while self._heap and self._heap[0][0] <= now:
            at, _, key = heapq.heappop(self._heap)
            if self._at.get(key) == at:
                del self._at[key]
                due.append(key)
        return due

    def next_at(self) -> datetime | None:
        return min(self._at.values(), default=None)

    def get(self, key: Key) -> datetime | None:
        return self._at.get(key)

    def __len__(self) -> int:
        return len(self._at)

    def _compact(self) -> None:
        self._heap = [entry for entry in self._heap if self._at.get(entry[2]) == entry[0]]
        heapq.heapify(self._heap)
