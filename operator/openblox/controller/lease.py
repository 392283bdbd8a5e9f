"""A coordination.k8s.io Lease, so one operator-wide loop runs in one replica only.

kopf's peering decides which replica handles events; the reaper is not an event
handler, so it holds a Lease of its own: acquire when free or expired, renew while held.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from openblox.controller.kube import Kube, is_conflict, is_not_found, path
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
    def __init__(
        self,
        kube: Kube,
        name: str,
        holder: str,
        duration_seconds: int = 15,
        clock: Callable[[], datetime] = _now,
    ) -> None:
        self._kube = kube
        self._name = name
        self._holder = holder
        self._duration = duration_seconds
        self._clock = clock
        # When this holder last renewed it: held without asking the API server again
        # until a third of the duration has passed.
        self._renewed: datetime | None = None

    def _path(self) -> str:
        return path(
            group="coordination.k8s.io",
            plural="leases",
            namespace=OPERATOR_NAMESPACE,
            name=self._name,
        )

    def try_hold(self) -> bool:
        """Take or renew the lease; True while this holder has it."""
        now = self._clock()
        if self._renewed is not None and now - self._renewed < timedelta(
            seconds=self._duration / 3
        ):
            return True
        self._renewed = None
        held = self._try_hold(now)
        if held:
            self._renewed = now
        return held

    def is_held(self) -> bool:
        """Whether this holder renewed the lease recently enough to act under it now, for
        loops in other threads than the one that renews it (which calls try_hold)."""
        renewed = self._renewed
        return renewed is not None and self._clock() - renewed < timedelta(
            seconds=self._duration * 2 / 3
        )

    def _try_hold(self, now: datetime) -> bool:
        spec: dict[str, Any] = {
            "holderIdentity": self._holder,
            "leaseDurationSeconds": self._duration,
            "renewTime": _micro(now),
        }
        try:
            current = self._kube.get(self._path())
        except Exception as error:
            if not is_not_found(error):
                raise
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self._name, "namespace": OPERATOR_NAMESPACE},
                "spec": {**spec, "acquireTime": _micro(now)},
            }
            try:
                self._kube.post(self._path().rpartition("/")[0], body)
            except Exception as create_error:
                if is_conflict(create_error):
                    return False
                raise
            return True
        current_spec = current.get("spec") or {}
        held_by = current_spec.get("holderIdentity")
        renewed = _parse(current_spec.get("renewTime"))
        duration = current_spec.get("leaseDurationSeconds") or self._duration
        expired = renewed is None or renewed + timedelta(seconds=duration) < now
        if held_by != self._holder and not expired:
            return False
        if held_by != self._holder:
            spec["acquireTime"] = _micro(now)
            log.info("taking lease %s from %s", self._name, held_by)
        current["spec"] = {**current_spec, **spec}
        try:
            # A replace carries resourceVersion, so two replicas cannot both win.
            self._kube.put(self._path(), current)
        except Exception as error:
            if is_conflict(error):
                return False
            raise
        return True
