"""The one operator-wide loop: reap expired sandboxes, run requeued reconciles, resync.

No per-object timers and no finalizers: a timer per Sandbox needs a finalizer, which
blocks deletion whenever the operator is down. One loop over the cache is cheaper and
leaves deletion to Kubernetes.

Watch events drive the reconcile (Sandboxes, their pods, Namespaces, RuntimeClasses,
the NetworkPolicy, the profiles). The loop only adds what no event brings: the
reconciles a reconcile asked for later (`Requeue`), a full pass over the unready ones
when something they may wait for changed (`request_resync`), and a slow safety resync
every `resync_seconds` in case an event was missed. It also sets the
`openblox_sandboxes` gauge from the cache.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime

from openblox.controller import metrics
from openblox.controller.events import EventRecorder
from openblox.controller.kube import Kube, is_conflict, is_not_found, path
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
        resync_seconds: float = 300.0,
        gauge_seconds: float = 5.0,
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
        self._gauge_interval = gauge_seconds
        self._clock = clock
        self._last_resync = self._clock().timestamp()
        self._last_gauge = 0.0
        self._resync_guard = threading.Lock()
        self._resync_all = False
        self._resync_namespaces: set[str] = set()

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(self._interval):
            try:
                self._maybe_set_gauge()
                self.run_requeued()
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
        current = self._cache.get(sandbox.namespace, sandbox.name)
        if current is not None:
            # Marks Ready=False/Expired first, so a watcher learns why it is going.
            self._reconciler.reconcile(current, "reaper")
        try:
            self._kube.delete(
                path(
                    group=GROUP,
                    version=VERSION,
                    plural=PLURAL,
                    namespace=sandbox.namespace,
                    name=sandbox.name,
                ),
                {"preconditions": {"uid": sandbox.uid}, "propagationPolicy": "Background"},
            )
        except Exception as error:
            if not (is_not_found(error) or is_conflict(error)):
                raise
            return
        metrics.REAPED.labels(expiry.reason).inc()
        log.info("reaped %s/%s (%s)", sandbox.namespace, sandbox.name, expiry.reason)

    def request_resync(self, namespace: str | None = None) -> None:
        """Something unready Sandboxes may wait for changed (profiles, a RuntimeClass):
        reconcile every unready one on the next pass. With a namespace (its labels
        changed, its NetworkPolicy went away), every Sandbox there, Ready or not."""
        with self._resync_guard:
            if namespace is None:
                self._resync_all = True
            else:
                self._resync_namespaces.add(namespace)

    def run_requeued(self) -> int:
        """The reconciles that reconciles asked for later and that are now due."""
        done = 0
        for namespace, name in self._reconciler.requeue.pop_due():
            sandbox = self._cache.get(namespace, name)
            if sandbox is None:
                continue
            done += 1
            try:
                self._reconciler.reconcile(sandbox, "requeue")
            except Exception:
                log.exception("requeued reconcile of %s/%s failed", namespace, name)
        return done

    def _maybe_resync(self) -> None:
        """Re-reconcile Sandboxes that are not Ready when asked, or every resync_seconds
        as a safety net against a missed event (settled ones cost no API request)."""
        now = self._clock().timestamp()
        with self._resync_guard:
            everything, namespaces = self._resync_all, self._resync_namespaces
            self._resync_all, self._resync_namespaces = False, set()
        if now - self._last_resync >= self._resync:
            everything = True
        if not everything and not namespaces:
            return
        if everything:
            self._last_resync = now
        for sandbox in self._cache.sandboxes():
            if sandbox.namespace not in namespaces and (not everything or _is_ready(sandbox)):
                continue
            try:
                self._reconciler.reconcile(sandbox, "resync")
            except Exception:
                log.exception("resync of %s/%s failed", sandbox.namespace, sandbox.name)

    def _maybe_set_gauge(self) -> None:
        now = self._clock().timestamp()
        if now - self._last_gauge < self._gauge_interval:
            return
        self._last_gauge = now
        metrics.set_sandboxes(self._cache.sandboxes())


def _is_ready(sandbox: Sandbox) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in sandbox.conditions)
