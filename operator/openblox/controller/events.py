"""Kubernetes Events on Sandboxes and the profiles ConfigMap, written once per distinct fact."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from openblox.controller.election import NotLeader
from openblox.controller.kube import Kube, path
from openblox.denials import Denial
from openblox.models import Sandbox
from openblox.names import API_VERSION, FIELD_MANAGER, GROUP, KIND, Reason
from openblox.timestamps import format_micro_timestamp

log = logging.getLogger(__name__)

# Remembered (object uid, reason, message) triples; bounded so a long-lived operator does
# not grow without limit. Forgetting one only means the Event may be written again.
_MEMORY = 4096


class EventRecorder:
    def __init__(self, kube: Kube, reporting_instance: str) -> None:
        self._kube = kube
        self._instance = reporting_instance
        self._seen: dict[tuple[str, str, str], None] = {}
        self._lock = threading.Lock()

    def record(
        self, involved: Mapping[str, Any], reason: str, message: str, *, warning: bool = True
    ) -> None:
        metadata = involved["metadata"]
        key = (metadata.get("uid", ""), reason, message)
        with self._lock:
            if key in self._seen:
                return
            self._seen[key] = None
            while len(self._seen) > _MEMORY:
                del self._seen[next(iter(self._seen))]
        now = format_micro_timestamp(datetime.now(UTC))
        namespace = metadata.get("namespace") or "default"
        body = {
            "metadata": {"generateName": f"{metadata['name']}.", "namespace": namespace},
            "involvedObject": {
                "apiVersion": involved.get("apiVersion"),
                "kind": involved.get("kind"),
                "name": metadata["name"],
                "namespace": metadata.get("namespace"),
                "uid": metadata.get("uid"),
                "resourceVersion": metadata.get("resourceVersion"),
            },
            "reason": reason,
            "message": message[:1024],
            "type": "Warning" if warning else "Normal",
            "source": {"component": FIELD_MANAGER},
            "reportingComponent": f"{GROUP}/{FIELD_MANAGER}",
            "reportingInstance": self._instance,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self._kube.post(path(plural="events", namespace=namespace), body)
        except Exception as error:  # an Event is best-effort: never fail a reconcile over one
            with self._lock:
                self._seen.pop(key, None)  # not written: it may be written next time
            if isinstance(error, NotLeader):
                return  # a standby writes nothing; the holder records it
            log.warning(
                "could not record event %s on %s", reason, metadata.get("name"), exc_info=True
            )


def sandbox_ref(sandbox: Sandbox) -> dict[str, Any]:
    """A Sandbox as an Event's involved object."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": sandbox.name, "namespace": sandbox.namespace, "uid": sandbox.uid},
    }


def record_denial(events: EventRecorder, involved: Mapping[str, Any], denial: Denial) -> None:
    """A `Denied` Event whose message is the record itself, as JSON (docs/denials.md)."""
    message = json.dumps(denial.to_dict(), separators=(",", ":"), ensure_ascii=False)
    events.record(involved, Reason.DENIED, message)
