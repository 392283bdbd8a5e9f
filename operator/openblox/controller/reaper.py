"""The one operator-wide loop: reap expired sandboxes and re-reconcile unsettled ones.

No per-object timers and no finalizers: a timer per Sandbox needs a finalizer, which
blocks deletion whenever the operator is down. One loop over the cache is cheaper and
leaves deletion to Kubernetes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime

from openblox.controller import metrics
from openblox.controller.events import EventRecorder
from openblox.controller.kube import Kube, is_conflict, is_not_found
from openblox.controller.lease import Lease
from openblox.controller.profile_store import ProfileStore
from openblox.controller.reconcile import Reconciler, record_denial
from openblox.controller.sandbox_cache import SandboxCache
from openblox.denials import lifetime_denial
from openblox.lifetime.expiry import Expiry
from openblox.lifetime.reaping import find_expired
from openblox.models import Sandbox
from openblox.names import API_VERSION, GROUP, KIND, PLURAL, VERSION, Reason

log = logging.getLogger(__name__)


class Reaper:
    def __init__(
        self,
        kube: Kube,
        cache: SandboxCache,
        profiles: ProfileStore,
        reconciler: Reconciler,
        *,
        events: EventRecorder,
        lease: Lease,
        interval_seconds: float = 1.0,
        resync_seconds: float = 5.0,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._kube = kube
        self._cache = cache
        self._profiles = profiles
        self._reconciler = reconciler
        self._events = events
        self._lease = lease
        self._interval = interval_seconds
        self._resync = resync_seconds
        self._clock = clock
        self._last_resync = 0.0

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(self._interval):
            try:
                if self._lease.try_hold():
                    self.reap_once()
                    self._maybe_resync()
            except Exception:
                log.exception("reaper pass failed; trying again next interval")

    def reap_once(self) -> int:
        reaped = 0
        for sandbox, expiry in list(
            find_expired(self._cache.sandboxes(), self._profiles.snapshot(), self._clock())
        ):
            self._reap(sandbox, expiry)
            reaped += 1
        return reaped

    def _reap(self, sandbox: Sandbox, expiry: Expiry) -> None:
        because = "idle timeout" if expiry.reason == "Idle" else "maximum age"
        message = f"sandbox reached its {because} at {expiry.expires_at.isoformat()}; deleting it"
        ref = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": sandbox.name, "namespace": sandbox.namespace, "uid": sandbox.uid},
        }
        self._events.record(ref, Reason.EXPIRED, message, warning=False)
        profile = self._profiles.get(sandbox.spec.profile)
        if profile is not None:
            record_denial(self._events, ref, lifetime_denial(sandbox, profile, expiry))
        body = self._cache.body(sandbox.namespace, sandbox.name)
        if body is not None:
            # Marks Ready=False/Expired first, so a watcher learns why it is going.
            self._reconciler.reconcile(body, "reaper")
        try:
            self._kube.custom.delete_namespaced_custom_object(
                GROUP,
                VERSION,
                sandbox.namespace,
                PLURAL,
                sandbox.name,
                body={"preconditions": {"uid": sandbox.uid}, "propagationPolicy": "Background"},
            )
        except Exception as error:
            if not (is_not_found(error) or is_conflict(error)):
                raise
            return
        metrics.REAPED.labels(expiry.reason).inc()
        log.info("reaped %s/%s (%s)", sandbox.namespace, sandbox.name, expiry.reason)

    def request_resync(self) -> None:
        self._last_resync = 0.0

    def _maybe_resync(self) -> None:
        """Re-reconcile sandboxes that are not Ready: some waits (a pod sandbox that the
        node cannot create) produce no watch event of their own."""
        now = self._clock().timestamp()
        if now - self._last_resync < self._resync:
            return
        self._last_resync = now
        for sandbox in self._cache.sandboxes():
            conditions = sandbox.status.get("conditions") or []
            ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
            if ready:
                continue
            body = self._cache.body(sandbox.namespace, sandbox.name)
            if body is None:
                continue
            try:
                self._reconciler.reconcile(body, "resync")
            except Exception:
                log.exception("resync of %s/%s failed", sandbox.namespace, sandbox.name)
