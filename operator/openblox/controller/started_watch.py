"""Tell the reconcile as soon as the kubelet has started a sandbox container.

The kubelet records a `Started` Event the moment the runtime has started a container,
but reports the pod Running and Ready only after its next relist of the runtime (the
generic PLEG relists every second). The boundary probe needs only a running container,
so it runs in that gap instead of after it, and the Sandbox becomes Ready as soon as its
pod does. The probe and the verdict are the same; only when the probe starts changes.
Pods that started before this watch began are probed once Ready, as before.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from openblox.controller.kube import Kube, path
from openblox.controller.watched import Watched
from openblox.names import CONTAINER_NAME

log = logging.getLogger(__name__)

WATCH_SECONDS = 300
FIELD_SELECTOR = "involvedObject.kind=Pod,reason=Started"
STARTED_FIELD_PATH = f"spec.containers{{{CONTAINER_NAME}}}"
# Probes take up to their timeout each; a few at once keep one slow pod from holding up
# the others, and a reconcile is serialised per Sandbox anyway.
WORKERS = 4


def started_pod(event: Mapping[str, Any], watched: Watched) -> tuple[str, str] | None:
    """(namespace, pod name) if the Event says a known sandbox pod's container started."""
    involved = event.get("involvedObject") or {}
    if involved.get("fieldPath") != STARTED_FIELD_PATH:
        return None
    namespace, name = str(involved.get("namespace") or ""), str(involved.get("name") or "")
    pod = watched.pod(namespace, name)
    if pod is None or pod["metadata"].get("uid") != involved.get("uid"):
        return None  # not a sandbox pod, or an earlier pod of the same name
    watched.container_started(str(involved["uid"]))
    return namespace, name


class StartedWatcher:
    def __init__(
        self, kube: Kube, watched: Watched, on_started: Callable[[str, str], None]
    ) -> None:
        self._kube = kube
        self._watched = watched
        self._on_started = on_started
        self._workers = ThreadPoolExecutor(WORKERS, thread_name_prefix="started")

    def run(self, stop: threading.Event) -> None:
        try:
            while not stop.is_set():
                try:
                    self._watch(stop)
                except Exception:
                    log.exception("Started events watch broke; restarting it")
                    stop.wait(2)
        finally:
            self._workers.shutdown(wait=False, cancel_futures=True)

    def _watch(self, stop: threading.Event) -> None:
        events = path(plural="events")
        # Only what happens from now on: a pod started earlier is probed once Ready.
        listing = self._kube.get(events, fieldSelector=FIELD_SELECTOR, limit=1)
        version = str((listing.get("metadata") or {}).get("resourceVersion") or "")
        while not stop.is_set():
            for change in self._kube.watch(
                events,
                resource_version=version,
                timeout_seconds=WATCH_SECONDS,
                fieldSelector=FIELD_SELECTOR,
            ):
                if stop.is_set():
                    return
                event = change.get("object") or {}
                version = str((event.get("metadata") or {}).get("resourceVersion") or version)
                if change["type"] != "ADDED":
                    continue
                started = started_pod(event, self._watched)
                if started is not None:
                    self._workers.submit(self._on_started, *started)
