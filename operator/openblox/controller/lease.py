"""A coordination.k8s.io Lease, so one operator-wide loop runs in one replica only.

kopf's peering decides which replica handles events; the reaper is not an event
handler, so it holds a Lease of its own: acquire when free or expired, renew while held.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from openblox.controller.kube import Kube, is_conflict, is_not_found
from openblox.names import OPERATOR_NAMESPACE

log = logging.getLogger(__name__)


def _now() -> datetime:
    return datetime.now(UTC)


def _micro(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


class Lease:
    def __init__(self, kube: Kube, name: str, holder: str, duration_seconds: int = 15) -> None:
        self._kube = kube
        self._name = name
        self._holder = holder
        self._duration = duration_seconds

    def try_hold(self) -> bool:
        """Take or renew the lease; True while this holder has it."""
        now = _now()
        spec = {
            "holderIdentity": self._holder,
            "leaseDurationSeconds": self._duration,
            "renewTime": _micro(now),
        }
        api = self._kube.coordination
        try:
            current: Any = api.read_namespaced_lease(self._name, OPERATOR_NAMESPACE)
        except Exception as error:
            if not is_not_found(error):
                raise
            body = {
                "metadata": {"name": self._name, "namespace": OPERATOR_NAMESPACE},
                "spec": {**spec, "acquireTime": _micro(now)},
            }
            try:
                api.create_namespaced_lease(OPERATOR_NAMESPACE, body)
            except Exception as create_error:
                if is_conflict(create_error):
                    return False
                raise
            return True
        held_by = current.spec.holder_identity
        renewed = current.spec.renew_time
        duration = current.spec.lease_duration_seconds or self._duration
        expired = renewed is None or renewed + timedelta(seconds=duration) < now
        if held_by != self._holder and not expired:
            return False
        if held_by != self._holder:
            spec["acquireTime"] = _micro(now)
            log.info("taking lease %s from %s", self._name, held_by)
        current.spec.holder_identity = self._holder
        current.spec.lease_duration_seconds = self._duration
        current.spec.renew_time = now
        if "acquireTime" in spec:
            current.spec.acquire_time = now
        try:
            # A replace carries resourceVersion, so two replicas cannot both win.
            api.replace_namespaced_lease(self._name, OPERATOR_NAMESPACE, current)
        except Exception as error:
            if is_conflict(error):
                return False
            raise
        return True
