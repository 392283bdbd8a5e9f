"""Follow one ConfigMap in openblox-system: list it, then watch it, calling back on each version."""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any

from openblox.controller.kube import Kube, path
from openblox.names import OPERATOR_NAMESPACE

log = logging.getLogger(__name__)

WATCH_SECONDS = 300


def follow_configmap(
    kube: Kube,
    name: str,
    apply: Callable[[Mapping[str, Any] | None], None],
    stop: threading.Event,
    *,
    on_relist: Callable[[], None] = lambda: None,
) -> None:
    """Calls `apply` with the ConfigMap (None while it does not exist) until `stop` is set."""
    while not stop.is_set():
        try:
            _watch(kube, name, apply, stop, on_relist)
        except Exception:
            log.exception("watch of ConfigMap %s broke; restarting it", name)
            stop.wait(2)


def _watch(
    kube: Kube,
    name: str,
    apply: Callable[[Mapping[str, Any] | None], None],
    stop: threading.Event,
    on_relist: Callable[[], None],
) -> None:
    configmaps = path(plural="configmaps", namespace=OPERATOR_NAMESPACE)
    field = f"metadata.name={name}"
    listing = kube.get(configmaps, fieldSelector=field)
    on_relist()
    items = listing.get("items") or []
    apply(items[0] if items else None)
    version = str((listing.get("metadata") or {}).get("resourceVersion") or "")
    while not stop.is_set():
        # Resumes from the last version seen; a 410 (too old) breaks out to re-list.
        for event in kube.watch(
            configmaps, resource_version=version, timeout_seconds=WATCH_SECONDS, fieldSelector=field
        ):
            if stop.is_set():
                return
            configmap = event.get("object") or {}
            version = str((configmap.get("metadata") or {}).get("resourceVersion") or version)
            apply(None if event["type"] == "DELETED" else configmap)


def data_of(configmap: Mapping[str, Any] | None) -> Mapping[str, str]:
    """The ConfigMap's data: none while it does not exist."""
    return (configmap.get("data") or {}) if configmap is not None else {}


class ConfigMapApplier(ABC):
    """Applies each version `follow_configmap` delivers, one at a time, and keeps the last
    one, which a takeover applies again (under `_applying`, so that re-apply never undoes
    a newer watch event)."""

    def __init__(self) -> None:
        self._applying = threading.Lock()
        self._last: Mapping[str, Any] | None = None

    def apply(self, configmap: Mapping[str, Any] | None) -> None:
        with self._applying:
            self._last = configmap
            self._apply(configmap)

    @abstractmethod
    def _apply(self, configmap: Mapping[str, Any] | None) -> None:
        """Take this version of the ConfigMap (None: it does not exist) into service."""
