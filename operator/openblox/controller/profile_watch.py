"""Keep the profile store in step with the admins' ConfigMap, and publish what admission needs.

Every replica watches (a standby's store is current when it takes over); only the
Lease holder writes: the admission parameters, and the Events about refused profiles.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from openblox.builders.admission import ADMISSION_CONFIGMAP, build_admission_configmap
from openblox.controller.configmap_watch import ConfigMapApplier, data_of, follow_configmap
from openblox.controller.election import NotLeader
from openblox.controller.events import EventRecorder
from openblox.controller.kube import Kube, is_not_found, path
from openblox.controller.profile_store import ProfileStore
from openblox.names import OPERATOR_NAMESPACE, PROFILES_CONFIGMAP

log = logging.getLogger(__name__)


class ProfileWatcher(ConfigMapApplier):
    def __init__(
        self,
        kube: Kube,
        store: ProfileStore,
        events: EventRecorder,
        on_change: Callable[[], None],
        leading: Callable[[], bool] = lambda: True,
    ) -> None:
        super().__init__()
        self._kube = kube
        self._leading = leading
        self._store = store
        self._events = events
        self._on_change = on_change
        # The admission parameters last written (or found current): not read again while
        # the profiles give the same ones.
        self._published: dict[str, str] | None = None

    def run(self, stop: threading.Event) -> None:
        follow_configmap(self._kube, PROFILES_CONFIGMAP, self.apply, stop, on_relist=self._relisted)

    def _relisted(self) -> None:
        self._published = None  # on every (re)list, check the admission parameters again

    def take_over(self) -> None:
        """This replica now holds the Lease: write what a standby left unwritten."""
        with self._applying:
            if not self._store.loaded():
                # Not read yet: applying "no ConfigMap" would publish admission parameters
                # with no profiles. The first list publishes, this replica leading.
                return
            self._published = None
            self._apply(self._last)

    def _apply(self, configmap: Mapping[str, Any] | None) -> None:
        update = self._store.update(data_of(configmap))
        for name, error in update.refused.items():
            kept = (
                " (its last good version stays in service)" if name in update.kept_last_good else ""
            )
            log.error("refused profile %s: %s%s", name, error.message, kept)
            if configmap is not None:
                body = {"apiVersion": "v1", "kind": "ConfigMap", **configmap}
                self._events.record(body, "ProfileRefused", error.message + kept)
        if update.changed or update.removed:
            log.info(
                "profiles changed: %s; removed: %s", list(update.changed), list(update.removed)
            )
        if self._leading():
            try:
                self._publish_admission_params()
            except NotLeader:
                log.info("not publishing the admission parameters: not the leader")
        if update.changed or update.removed or update.refused:
            self._on_change()

    def _publish_admission_params(self) -> None:
        desired = build_admission_configmap(self._store.snapshot())
        if desired["data"] == self._published:
            return
        target = path(plural="configmaps", namespace=OPERATOR_NAMESPACE, name=ADMISSION_CONFIGMAP)
        try:
            current = self._kube.get(target)
        except Exception as error:
            if not is_not_found(error):
                raise
            self._kube.post(target.rpartition("/")[0], desired)
            self._published = dict(desired["data"])
            return
        if (current.get("data") or {}) != desired["data"]:
            self._kube.put(target, desired)
        self._published = dict(desired["data"])
