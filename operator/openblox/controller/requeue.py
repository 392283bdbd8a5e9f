"""Reconciles asked for later, by key: the few waits that no watch event ends.

A pod stuck Pending because the node cannot create its sandbox changes nothing the pod
watch would deliver, and an inconclusive boundary probe has nothing to wait for. Instead
of re-reconciling every unready Sandbox on a short timer, the reconcile that meets such
a wait asks to be called again, with a growing delay while the wait lasts.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

MAX_DELAY_SECONDS = 30.0


class Requeue:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._due: dict[tuple[str, str], float] = {}
        self._delays: dict[tuple[str, str], float] = {}
        self._clock = clock

    def after(self, key: tuple[str, str], first_delay: float) -> None:
        """Reconcile `key` again later: first_delay, then doubling (capped) while it repeats."""
        with self._lock:
            delay = min(self._delays.get(key, first_delay / 2) * 2, MAX_DELAY_SECONDS)
            delay = max(delay, first_delay)
            self._delays[key] = delay
            due = self._clock() + delay
            self._due[key] = min(self._due.get(key, due), due)

    def settled(self, key: tuple[str, str]) -> None:
        """The wait is over: forget the key and its back-off."""
        with self._lock:
            self._due.pop(key, None)
            self._delays.pop(key, None)

    def pop_due(self) -> list[tuple[str, str]]:
        now = self._clock()
        with self._lock:
            due = [key for key, at in self._due.items() if at <= now]
            for key in due:
                del self._due[key]
            return due

    def __len__(self) -> int:
        with self._lock:
            return len(self._due)


class Resyncs:
    """Passes over many Sandboxes, asked for when something they may wait for changed:
    every unready one (profiles, a RuntimeClass), or every one in a namespace (its labels,
    its NetworkPolicy). The reaper's loop takes them at its next pass."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._everything = False
        self._namespaces: set[str] = set()

    def request(self, namespace: str | None = None) -> None:
        """Every unready Sandbox at the next pass; with a namespace, every Sandbox there,
        Ready or not."""
        with self._lock:
            if namespace is None:
                self._everything = True
            else:
                self._namespaces.add(namespace)

    def take(self) -> tuple[bool, set[str]]:
        """(every unready one?, the namespaces to pass over whole) asked for since the last take."""
        with self._lock:
            taken = (self._everything, self._namespaces)
            self._everything, self._namespaces = False, set()
            return taken
