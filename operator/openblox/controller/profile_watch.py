"""Keep the profile store in step with the admins' ConfigMap, and publish what admission needs."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import watch

from openblox.builders.admission import ADMISSION_CONFIGMAP, build_admission_configmap
from openblox.controller.events import EventRecorder
from openblox.controller.kube import Kube, is_not_found
from openblox.controller.profile_store import ProfileStore
from openblox.names import OPERATOR_NAMESPACE, PROFILES_CONFIGMAP

log = logging.getLogger(__name__)


class ProfileWatcher:
    def __init__(
        self, kube: Kube, store: ProfileStore, events: EventRecorder, on_change: Callable[[], None]
    ) -> None:
        self._kube = kube
        self._store = store
        self._events = events
        self._on_change = on_change

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self._watch(stop)
            except Exception:
                log.exception("profiles watch broke; restarting it")
                stop.wait(2)

    def _watch(self, stop: threading.Event) -> None:
        core = self._kube.core
        field = f"metadata.name={PROFILES_CONFIGMAP}"
        listing = core.list_namespaced_config_map(OPERATOR_NAMESPACE, field_selector=field)
        self.apply(listing.items[0] if listing.items else None)
        stream = watch.Watch().stream(
            core.list_namespaced_config_map,
            OPERATOR_NAMESPACE,
            field_selector=field,
            resource_version=listing.metadata.resource_version,
            timeout_seconds=60,
        )
        for event in stream:
            if stop.is_set():
                return
            self.apply(None if event["type"] == "DELETED" else event["object"])

    def apply(self, configmap: Any) -> None:
        data: Mapping[str, str] = (configmap.data or {}) if configmap is not None else {}
        update = self._store.update(data)
        for name, error in update.refused.items():
            kept = (
                " (its last good version stays in service)" if name in update.kept_last_good else ""
            )
            log.error("refused profile %s: %s%s", name, error.message, kept)
            if configmap is not None:
                body = self._kube.core.api_client.sanitize_for_serialization(configmap)
                body.setdefault("apiVersion", "v1")
                body.setdefault("kind", "ConfigMap")
                self._events.record(body, "ProfileRefused", error.message + kept)
        if update.changed or update.removed:
            log.info(
                "profiles changed: %s; removed: %s", list(update.changed), list(update.removed)
            )
        self._publish_admission_params()
        self._on_change()

    def _publish_admission_params(self) -> None:
        desired = build_admission_configmap(self._store.snapshot())
        core = self._kube.core
        try:
            current = core.read_namespaced_config_map(ADMISSION_CONFIGMAP, OPERATOR_NAMESPACE)
        except Exception as error:
            if not is_not_found(error):
                raise
            core.create_namespaced_config_map(OPERATOR_NAMESPACE, desired)
            return
        if (current.data or {}) != desired["data"]:
            core.replace_namespaced_config_map(ADMISSION_CONFIGMAP, OPERATOR_NAMESPACE, desired)
