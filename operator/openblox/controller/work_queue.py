"""The Sandboxes that wait for a reconcile a watch event asked for, each at most once.

A watch event used to run its reconcile inside the watch library's handler. In a burst
(thousands of Sandboxes and their pods within a minute) every event then waited for one
of the handler threads while the library held its whole body, and the operator's memory
grew with the backlog: it was OOM-killed near 2,000 Sandboxes with pods. Now a handler
keeps only the slim copy the caches hold and adds the Sandbox's key here, and returns.

The promises are client-go's workqueue's: a key waits at most once however many events
named it before a worker took it; no two workers reconcile one key at once; a key added
while its reconcile runs is taken again once that reconcile is done, so no change that
came in the meantime is missed.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable

log = logging.getLogger(__name__)

Key = tuple[str, str]
# How long a worker waits for a key before it looks at its stop signal again.
TAKE_TIMEOUT_SECONDS = 1.0


class WorkQueue:
    def __init__(self) -> None:
        self._ready = threading.Condition()
        self._order: deque[Key] = deque()
        self._waiting: dict[Key, str] = {}  # key -> the trigger that first asked
        self._running: set[Key] = set()
        self._again: dict[Key, str] = {}  # asked for while its reconcile runs

    def add(self, key: Key, trigger: str) -> None:
        with self._ready:
            if key in self._running:
                self._again.setdefault(key, trigger)
            elif key not in self._waiting:
                self._waiting[key] = trigger
                self._order.append(key)
                self._ready.notify()

    def take(self, timeout: float = TAKE_TIMEOUT_SECONDS) -> tuple[Key, str] | None:
        """The oldest waiting key and its trigger, now running; None if none came in time."""
        with self._ready:
            if not self._order and not self._ready.wait_for(lambda: bool(self._order), timeout):
                return None
            key = self._order.popleft()
            self._running.add(key)
            return key, self._waiting.pop(key)

    def done(self, key: Key) -> None:
        with self._ready:
            self._running.discard(key)
            trigger = self._again.pop(key, None)
            if trigger is not None and key not in self._waiting:
                self._waiting[key] = trigger
                self._order.append(key)
                self._ready.notify()

    def __len__(self) -> int:
        with self._ready:
            return len(self._order)


def work(queue: WorkQueue, handle: Callable[[Key, str], None], stop: threading.Event) -> None:
    """One worker: take a key, handle it, and say it is done, until `stop` is set.
    A failed handle is logged here; retrying is the reconcile's own business."""
    while not stop.is_set():
        taken = queue.take()
        if taken is None:
            continue
        key, trigger = taken
        try:
            handle(key, trigger)
        except Exception:
            log.exception("reconcile of %s/%s (%s) failed", key[0], key[1], trigger)
        finally:
            queue.done(key)
