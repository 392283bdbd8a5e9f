"""The warm pools the admins asked for, kept from the ConfigMap openblox-pools.

As with profiles, a broken key never takes a working pool away: its last good version
stays in service (its warm pods are kept), the other keys are unaffected, and the
admin sees a `PoolRefused` Event on the ConfigMap that says what to fix.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from openblox.controller.configmap_watch import ConfigMapApplier, data_of, follow_configmap
from openblox.controller.events import EventRecorder
from openblox.controller.kube import Kube
from openblox.models.pool import Pool, parse_pools
from openblox.names import POOLS_CONFIGMAP, Reason

log = logging.getLogger(__name__)


class PoolStore(ConfigMapApplier):
    def __init__(
        self, kube: Kube, events: EventRecorder, on_change: Callable[[], None] = lambda: None
    ) -> None:
        super().__init__()
        self._kube = kube
        self._events = events
        self._on_change = on_change
        self._lock = threading.Lock()
        self._pools: dict[str, Pool] = {}
        self._configmap: dict[str, Any] | None = None
        self._loaded = threading.Event()

    def run(self, stop: threading.Event) -> None:
        follow_configmap(self._kube, POOLS_CONFIGMAP, self.apply, stop)

    def take_over(self) -> None:
        """This replica now holds the Lease: record the Events a standby left unwritten
        (the recorder forgets an Event a standby was refused, so it is written now)."""
        with self._applying:
            if self._loaded.is_set():
                self._apply(self._last)

    def _apply(self, configmap: Mapping[str, Any] | None) -> None:
        good, broken = parse_pools(data_of(configmap))
        with self._lock:
            previous = self._pools
            current = dict(good)
            for name in broken:
                if name in previous:
                    current[name] = previous[name]
            changed = current != previous
            self._pools = current
            self._configmap = (
                {"apiVersion": "v1", "kind": "ConfigMap", **configmap} if configmap else None
            )
        self._loaded.set()
        for name, error in broken.items():
            kept = " (its last good version stays in service)" if name in current else ""
            log.error("%s%s", error.message, kept)
            self.record(Reason.POOL_REFUSED, error.message + kept)
        if changed:
            log.info("pools now: %s", sorted(current))
            self._on_change()

    def loaded(self) -> bool:
        """Whether the ConfigMap has been read once: before, no pool is known to be gone."""
        return self._loaded.is_set()

    def pools(self) -> list[Pool]:
        with self._lock:
            return sorted(self._pools.values(), key=lambda p: p.name)

    def serving(self, profile: str, namespace: str) -> list[Pool]:
        """The pools that keep warm pods of this profile in this namespace."""
        return [p for p in self.pools() if p.profile == profile and namespace in p.namespaces]

    def record(self, reason: str, message: str) -> None:
        """An Event on the pools ConfigMap, where the admin who wrote it looks."""
        with self._lock:
            configmap = self._configmap
        if configmap is not None:
            self._events.record(configmap, reason, message)
