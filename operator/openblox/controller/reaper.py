"""The one operator-wide loop: reap expired sandboxes, run requeued reconciles, resync.

It acts only in the replica that holds the operator's Lease (`Election`); a standby
runs it idle. No per-object timers and no finalizers: a kopf timer per Sandbox needs a
finalizer, which blocks deletion whenever the operator is down. Instead each reconcile
arms the Sandbox's deadline in `Deadlines` (memory only), and every pass reaps what is
due; a sweep over the whole cache every `sweep_seconds` is the safety net for a
deadline nobody armed.

Watch events drive the reconcile (Sandboxes, their pods, Namespaces, RuntimeClasses,
the NetworkPolicy, the profiles). The loop only adds what no event brings: the
reconciles a reconcile asked for later (`Requeue`), a full pass over the unready ones
when something they may wait for changed (`Resyncs`), a slow safety resync every
`resync_seconds` in case an event was missed, and, on taking the Lease over, a
reconcile of every Sandbox (a standby saw the events but acted on none). It also sets
the `openblox_sandboxes` gauge from the cache, in every replica.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

from openblox.controller import metrics
from openblox.controller.deadlines import Deadlines
from openblox.controller.election import Election, NotLeader
from openblox.controller.events import EventRecorder, record_denial, sandbox_ref
from openblox.controller.kube import Kube, is_conflict, is_not_found, sandbox_path
from openblox.controller.profile_store import ProfileStore
from openblox.controller.requeue import Requeue, Resyncs
from openblox.controller.sandbox_cache import SandboxCache
from openblox.denials import lifetime_denial
from openblox.lifetime.expiry import Expiry
from openblox.lifetime.reaping import expiry_of
from openblox.models import Profile, Sandbox
from openblox.names import ConditionType, Reason
from openblox.timestamps import format_timestamp

log = logging.getLogger(__name__)

# Uids already deleted, so a sweep that runs before the deletion's watch event arrives
# does not reap one twice; bounded, forgetting one only costs a 404.
_REAPED_MEMORY = 4096
# A Sandbox whose reaping failed (the API refused its delete, say) is tried again this soon.
REAP_RETRY_SECONDS = 5.0
# Expired Sandboxes reaped at once. Reaping one is four requests in turn (its Expired
# Event, its denial, the Expired status, the delete): one at a time, 10,000 expiring
# together took six minutes, and the last outlived its deadline by as much.
REAP_AT_ONCE = 8


class Reaper:
    def __init__(
        self,
        kube: Kube,
        cache: SandboxCache,
        profiles: ProfileStore,
        *,
        reconcile: Callable[[Sandbox, str], None],
        requeue: Requeue,
        deadlines: Deadlines,
        resyncs: Resyncs,
        events: EventRecorder,
        election: Election,
        on_takeover: Callable[[], None] = lambda: None,
        interval_seconds: float = 1.0,
        sweep_seconds: float = 30.0,
        resync_seconds: float = 300.0,
        gauge_seconds: float = 5.0,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._kube = kube
        self._cache = cache
        self._profiles = profiles
        self._reconcile = reconcile
        self._requeue = requeue
        self._deadlines = deadlines
        self._resyncs = resyncs
        self._events = events
        self._election = election
        self._interval = interval_seconds
        self._sweep = sweep_seconds
        self._resync = resync_seconds
        self._gauge_interval = gauge_seconds
        self._clock = clock
        # What else a new holder writes first (admission parameters, refused-config Events).
        self._on_takeover = on_takeover
        self._leading = False
        self._last_sweep = self._clock().timestamp()
        self._last_resync = self._clock().timestamp()
        self._last_gauge = 0.0
        self._reaped: dict[str, None] = {}
        self._reaped_lock = threading.Lock()
        self._reapers = ThreadPoolExecutor(REAP_AT_ONCE, thread_name_prefix="reap")

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(self._interval):
            try:
                self._maybe_set_gauge()
                if not self._election.leading:
                    self._leading = False
                    continue
                if not self._leading:
                    self._leading = True
                    self.take_over()
                self.run_requeued()
                self.reap_due()
                self._maybe_sweep()
                self._maybe_resync()
            except NotLeader:
                log.info("lost the Lease during a pass; the loop stands by")
            except Exception:
                log.exception("reaper pass failed; trying again next interval")

    def take_over(self) -> None:
        """This replica just took the Lease: what expired while nobody held it goes first,
        then every Sandbox is reconciled (in a thread, so reaping keeps its pace)."""
        log.info("taking over: sweeping, then reconciling every Sandbox")
        self._last_sweep = self._clock().timestamp()
        self.reap_once()
        self._on_takeover()
        threading.Thread(target=self.reconcile_all, name="takeover", daemon=True).start()

    def reconcile_all(self) -> int:
        done = 0
        for sandbox in self._cache.sandboxes():
            if not self._election.leading:
                break
            current = self._cache.get(sandbox.namespace, sandbox.name)
            if current is None:
                continue
            try:
                self._reconcile(current, "takeover")
                done += 1
            except Exception:
                log.exception("reconcile of %s/%s failed", sandbox.namespace, sandbox.name)
        return done

    def reap_once(self) -> int:
        """The sweep: every cached Sandbox past its deadline, armed or not."""
        return self._reap_each(self._cache.sandboxes(), self._profiles.snapshot(), self._clock())

    def reap_due(self) -> int:
        """The Sandboxes whose armed deadline has come; one whose deadline moved (activity
        postponed its idle timeout) is armed again at the new one."""
        now = self._clock()
        due = self._deadlines.pop_due(now)
        if not due:
            return 0
        sandboxes = [sandbox for key in due if (sandbox := self._cache.get(*key)) is not None]
        return self._reap_each(sandboxes, self._profiles.snapshot(), now)

    def _reap_each(
        self, sandboxes: Iterable[Sandbox], profiles: Mapping[str, Profile], now: datetime
    ) -> int:
        """Reap those whose time is up, REAP_AT_ONCE at a time; arm the others at their
        deadline. Whatever one Sandbox does to the arithmetic or the API (a stamp at the
        edge of the calendar, a body too large to patch, a refused delete) costs this
        Sandbox alone: it is logged, armed again shortly, and the others go on. Only
        losing the Lease ends the pass."""
        expired = [
            (sandbox, expiry)
            for sandbox in sandboxes
            if (expiry := self._expired_or_armed(sandbox, profiles, now)) is not None
        ]
        if len(expired) <= 1:
            return sum(self._reap_isolated(sandbox, expiry, now) for sandbox, expiry in expired)
        return sum(
            self._reapers.map(lambda pair: self._reap_isolated(pair[0], pair[1], now), expired)
        )

    def _expired_or_armed(
        self, sandbox: Sandbox, profiles: Mapping[str, Profile], now: datetime
    ) -> Expiry | None:
        """Its expiry if its time is up; else None, with its deadline armed."""
        try:
            expiry = expiry_of(sandbox, profiles, now)
            if expiry is not None and not expiry.expired:
                self._deadlines.arm((sandbox.namespace, sandbox.name), expiry.expires_at)
                return None
            return expiry
        except Exception:
            self._failed(sandbox, now)
            return None

    def _reap_isolated(self, sandbox: Sandbox, expiry: Expiry, now: datetime) -> int:
        try:
            return self._reap(sandbox, expiry)
        except NotLeader:
            raise
        except Exception:
            self._failed(sandbox, now)
            return 0

    def _failed(self, sandbox: Sandbox, now: datetime) -> None:
        metrics.REAP_ERRORS.inc()
        log.exception(
            "reaping %s/%s failed; trying it again in %.0f s",
            sandbox.namespace,
            sandbox.name,
            REAP_RETRY_SECONDS,
        )
        self._deadlines.arm(
            (sandbox.namespace, sandbox.name), now + timedelta(seconds=REAP_RETRY_SECONDS)
        )

    def _maybe_sweep(self) -> None:
        now = self._clock().timestamp()
        if now - self._last_sweep >= self._sweep:
            self._last_sweep = now
            if self.reap_once():
                log.warning("the sweep reaped Sandboxes no armed deadline had caught")

    def _reap(self, sandbox: Sandbox, expiry: Expiry) -> int:
        with self._reaped_lock:
            if sandbox.uid in self._reaped:
                return 0
        because = "idle timeout" if expiry.reason == "Idle" else "maximum age"
        message = (
            f"sandbox reached its {because} at {format_timestamp(expiry.expires_at)}; deleting it"
        )
        ref = sandbox_ref(sandbox)
        # What a watcher learns before it goes (an Event, a denial, Ready=False/Expired) is
        # worth a try, never the delete itself: each failure here is logged and passed.
        _best_effort(
            sandbox,
            "record its Expired Event",
            lambda: self._events.record(ref, Reason.EXPIRED, message, warning=False),
        )
        profile = self._profiles.get(sandbox.spec.profile)
        if profile is not None:
            _best_effort(
                sandbox,
                "record its denial",
                lambda: record_denial(self._events, ref, lifetime_denial(sandbox, profile, expiry)),
            )
        current = self._cache.get(sandbox.namespace, sandbox.name)
        if current is not None:
            _best_effort(sandbox, "mark it Expired", lambda: self._reconcile(current, "reaper"))
        try:
            self._kube.delete(
                sandbox_path(sandbox.namespace, sandbox.name),
                {"preconditions": {"uid": sandbox.uid}, "propagationPolicy": "Background"},
            )
        except Exception as error:
            if not (is_not_found(error) or is_conflict(error)):
                raise
            return 0
        with self._reaped_lock:
            self._reaped[sandbox.uid] = None
            while len(self._reaped) > _REAPED_MEMORY:
                del self._reaped[next(iter(self._reaped))]
        metrics.REAPED.labels(expiry.reason).inc()
        log.info("reaped %s/%s (%s)", sandbox.namespace, sandbox.name, expiry.reason)
        return 1

    def run_requeued(self) -> int:
        """The reconciles that reconciles asked for later and that are now due."""
        done = 0
        for namespace, name in self._requeue.pop_due():
            sandbox = self._cache.get(namespace, name)
            if sandbox is None:
                continue
            done += 1
            try:
                self._reconcile(sandbox, "requeue")
            except Exception:
                log.exception("requeued reconcile of %s/%s failed", namespace, name)
        return done

    def _maybe_resync(self) -> None:
        """Re-reconcile Sandboxes that are not Ready when asked, or every resync_seconds
        as a safety net against a missed event (settled ones cost no API request)."""
        now = self._clock().timestamp()
        everything, namespaces = self._resyncs.take()
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
                self._reconcile(sandbox, "resync")
            except Exception:
                log.exception("resync of %s/%s failed", sandbox.namespace, sandbox.name)

    def _maybe_set_gauge(self) -> None:
        now = self._clock().timestamp()
        if now - self._last_gauge < self._gauge_interval:
            return
        self._last_gauge = now
        metrics.set_sandboxes(self._cache.sandboxes())


def _is_ready(sandbox: Sandbox) -> bool:
    return any(
        c.get("type") == ConditionType.READY and c.get("status") == "True"
        for c in sandbox.conditions
    )


def _best_effort(sandbox: Sandbox, what: str, step: Callable[[], object]) -> None:
    try:
        step()
    except NotLeader:
        raise
    except Exception:
        log.exception(
            "reaping %s/%s: could not %s; deleting it anyway", sandbox.namespace, sandbox.name, what
        )
