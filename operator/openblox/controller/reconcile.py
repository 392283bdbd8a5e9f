"""The one reconcile: observe a Sandbox's world, make the pod exist, report the status.

Two halves: resolve what the Sandbox should be (`resolve.py`: its profile, deadline and
runtime, or the typed reason no pod may be made), then converge its pod to that.
Level-based and idempotent: every trigger (a Sandbox event, a pod event, a requeue,
the slow safety resync) calls the same function with the latest Sandbox, and it
converges from whatever it finds. What it observes comes from the watches (`Watched`):
the Namespace's labels, the RuntimeClass, the namespace's NetworkPolicy and the pod; a
reconcile of a settled Sandbox makes no API request at all. A pod the watch has not
shown is created without a read first: a 409 means it exists, and it is adopted only if
this Sandbox owns it. The status is patched only when it changed.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from openblox.builders.conditions import Observation, status_changed
from openblox.builders.pod_state import (
    LOST_NODE_GRACE_SECONDS,
    PodState,
    image_not_pulled,
    lost_node,
    node_trouble,
    unschedulable_runtime,
)
from openblox.builders.status import build_status, profile_digest, status_patch
from openblox.controller import metrics
from openblox.controller.deadlines import Deadlines
from openblox.controller.election import NotLeader
from openblox.controller.events import EventRecorder, record_denial, sandbox_ref
from openblox.controller.kube import Kube, is_namespace_terminating, is_not_found, sandbox_path
from openblox.controller.namespaces import Namespaces
from openblox.controller.pod_boundaries import PodBoundaries
from openblox.controller.profile_store import ProfileStore
from openblox.controller.requeue import Requeue
from openblox.controller.resolve import Wanted, resolve
from openblox.controller.runtime_checks import RuntimeChecks
from openblox.controller.sandbox_cache import SandboxCache
from openblox.controller.sandbox_pods import PodRefused, SandboxPods
from openblox.controller.unprepared_nodes import UnpreparedNodes, not_prepared
from openblox.denials import Denial, pod_denial
from openblox.lifetime import Expiry
from openblox.models import Profile, Sandbox, SandboxError, parse_sandbox
from openblox.names import ConditionType, Reason
from openblox.timestamps import parse_optional_timestamp

log = logging.getLogger(__name__)

# A reconcile that failed (an API error, a timeout) is tried again, backing off from this.
ERROR_RETRY_SECONDS = 2.0
# A pod the API server refused (a quota, an admission policy) is asked for again this
# often: a quota may free up, a policy may be changed.
REFUSED_POD_RETRY_SECONDS = 10.0


class Reconciler:
    """The one reconcile; every part it works with is built once (`Runtime.build`) and
    handed in, shared with the loops that need the same part."""

    def __init__(
        self,
        kube: Kube,
        profiles: ProfileStore,
        events: EventRecorder,
        *,
        namespaces: Namespaces,
        runtimes: RuntimeChecks,
        pods: SandboxPods,
        boundaries: PodBoundaries,
        unprepared: UnpreparedNodes,
        cache: SandboxCache,
        requeue: Requeue,
        deadlines: Deadlines,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ):
        self._kube = kube
        self._profiles = profiles
        self._events = events
        self._namespaces = namespaces
        self._runtimes = runtimes
        self._pods = pods
        self._boundaries = boundaries
        self._unprepared = unprepared
        self._cache = cache
        self._requeue = requeue
        self._deadlines = deadlines
        self._clock = clock
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._ready_seen: set[str] = set()

    # ------------------------------------------------------------------ entry point

    def reconcile(self, body: Mapping[str, Any] | Sandbox, trigger: str) -> None:
        metrics.RECONCILES.labels(trigger).inc()
        sandbox = body if isinstance(body, Sandbox) else parse_sandbox(body)
        with self._lock_for(sandbox.uid):
            sandbox = self._latest(sandbox)
            try:
                if sandbox.deletion_timestamp is not None:
                    self._end_pods_of_deleted(sandbox)
                else:
                    self._reconcile(sandbox)
            except NotLeader:
                # This replica stopped holding the Lease mid-reconcile: the holder
                # reconciles everything when it takes over, so there is nothing to retry.
                log.info(
                    "stopped reconciling %s/%s: not the leader", sandbox.namespace, sandbox.name
                )
                return
            except Exception as error:
                if is_namespace_terminating(error):
                    # Its Sandboxes go with the namespace: nothing to make, nothing to retry.
                    log.debug("namespace %s is being deleted", sandbox.namespace)
                    return
                metrics.RECONCILE_ERRORS.inc()
                # Nothing else may come to retry it (no event, no short resync): back off.
                self._requeue.after((sandbox.namespace, sandbox.name), ERROR_RETRY_SECONDS)
                raise

    def forget(self, uid: str, namespace: str = "", name: str = "") -> None:
        with self._locks_guard:
            self._locks.pop(uid, None)
        self._ready_seen.discard(uid)
        self._pods.forget(uid)
        if name:
            self._unprepared.forget((namespace, name))
            self._requeue.settled((namespace, name))
            self._deadlines.disarm((namespace, name))

    def _latest(self, sandbox: Sandbox) -> Sandbox:
        """The cache's copy, once this Sandbox's lock is held. Every trigger's copy went
        through the cache (a watch event is cached before it is reconciled), and the cache
        holds the watch's newest copy or the answer of our own last write, whichever came
        later; a trigger that waited for the lock (the pod event of a hand-out, handled
        beside the reconcile that made it) may carry a copy from before that reconcile's
        status write, and reconciling that would write the same status again."""
        if self._cache is None:
            return sandbox
        cached = self._cache.get(sandbox.namespace, sandbox.name)
        return cached if cached is not None and cached.uid == sandbox.uid else sandbox

    def _lock_for(self, uid: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(uid, threading.Lock())

    # ------------------------------------------------------------------ the steps

    def _end_pods_of_deleted(self, sandbox: Sandbox) -> None:
        """A Sandbox being deleted keeps no pod running, whatever holds the Sandbox itself
        back: a finalizer of the caller's, or `--cascade=orphan`, whose garbage collector
        may not strip a sandbox pod's owner (admission lets it only delete), so it waits
        until the pod is gone. Either would otherwise leave the pod running on its own
        deadline, past the Sandbox's end and outside the reaper's reach."""
        self._deadlines.disarm((sandbox.namespace, sandbox.name))
        self._pods.end(sandbox, self._pods.owned(sandbox), "it is being deleted")

    def _reconcile(self, sandbox: Sandbox) -> None:
        now = self._clock()
        observation, profile, pod = self._observe_and_converge(sandbox, now)
        status = build_status(
            sandbox,
            observation,
            pod_name=pod["metadata"]["name"] if pod is not None else None,
            runtime_class_name=profile.runtime_class_name if profile else None,
            profile_digest=profile_digest(pod, profile),
            exec_limits=profile.exec if profile else None,
            now=now,
            process_cap=profile.resources.processes if profile else None,
        )
        self._write_status(sandbox, status)
        self._count_ready(sandbox, status, now)

    def _observe_and_converge(
        self, sandbox: Sandbox, now: datetime
    ) -> tuple[Observation, Profile | None, dict[str, Any] | None]:
        """Resolve what the Sandbox should be, then converge its pod to that."""
        resolution = resolve(
            sandbox,
            now,
            profiles=self._profiles,
            namespaces=self._namespaces,
            runtimes=self._runtimes,
        )
        self._arm(sandbox, resolution.expiry)
        if isinstance(resolution, Wanted):
            observation, pod = self._converge(sandbox, resolution, now)
            return observation, resolution.profile, pod
        # No new pod: why is said, and the pod it has, if any, is reported (an expired
        # one the reaper deletes).
        why = resolution.event()
        if why is not None:
            self._events.record(sandbox_ref(sandbox), *why)
        return resolution.observation(), resolution.profile, self._pods.read(sandbox)

    def _converge(
        self, sandbox: Sandbox, wanted: Wanted, now: datetime
    ) -> tuple[Observation, dict[str, Any] | None]:
        """Make the Sandbox's one pod exist, then tend it as it is."""
        base = wanted.observation()
        key = (sandbox.namespace, sandbox.name)
        hold = self._unprepared.held(key, now)
        if hold is not None and not self._pods.owned(sandbox):
            # Its last pod's node was not prepared: the next pod waits out the hold.
            self._requeue.after(key, max((hold.until - now).total_seconds(), 0.0) + 0.1)
            return replace(base, node_not_prepared=hold.message), None
        self._namespaces.prepare(sandbox.namespace)
        try:
            pod, conflict = self._pods.ensure(
                sandbox, wanted.profile, now, self._unprepared.avoided(now)
            )
        except PodRefused as refused:
            self._events.record(sandbox_ref(sandbox), Reason.POD_NOT_CREATED, str(refused))
            self._requeue.after(key, REFUSED_POD_RETRY_SECONDS)
            return replace(base, pod_refused=str(refused)), None
        if conflict:
            return replace(base, pod_conflict=conflict), None
        if pod is None:
            return base, None
        return self._tend(sandbox, wanted.profile, pod, base, now), pod

    def _tend(
        self,
        sandbox: Sandbox,
        profile: Profile,
        pod: dict[str, Any],
        base: Observation,
        now: datetime,
    ) -> Observation:
        """What the pod's state asks for: release it from a lost node, wait for its
        deletion, replace it when it ended, report a runtime the node lacks, or check the
        boundary it runs behind."""
        state = PodState.from_pod(pod)
        # Requeues are keyed by the Sandbox (a pool pod's name is not the Sandbox's).
        key = (sandbox.namespace, sandbox.name)
        on_node = replace(base, pod=state, node_problem=node_trouble(pod))
        node = lost_node(pod, now)
        if node is not None:
            self._release_pod_of_lost_node(sandbox, pod, node)
            return on_node
        deleted = pod["metadata"].get("deletionTimestamp")
        if deleted and not state.terminated:
            # A pod stuck Terminating sends no more events: look again once it may count
            # as left on a lost node. Nothing below may settle that wait (a pod that was
            # Running is no Pending wait), or the release waits for the next resync.
            deleted_at = parse_optional_timestamp(deleted)
            since = (now - deleted_at).total_seconds() if deleted_at else 0.0
            self._requeue.after(key, max(LOST_NODE_GRACE_SECONDS - since, 0) + 1)
            return on_node
        if on_node.node_problem is not None:
            # Its node stopped answering: a boundary probe would hang on the exec until
            # its timeout, holding this Sandbox's reconciles (and the eviction's event)
            # back. The eviction that follows brings the next reconcile.
            return on_node
        if state.terminated:
            ended = pod_denial(pod, profile=profile.name, now=now)
            self._replace_dead_pod(sandbox, pod, state, ended)
            return replace(base, pod=state, denials=(ended,) if ended else ())
        sandbox_failure = unschedulable_runtime(
            pod, profile.runtime_class_name
        ) or self._runtimes.creation_failure(self._requeue, key, pod, profile, now)
        if sandbox_failure:
            self._events.record(sandbox_ref(sandbox), Reason.RUNTIME_UNAVAILABLE, sandbox_failure)
            return replace(
                base, runtime_available=False, runtime_message=sandbox_failure, pod=state
            )
        pull_failure = image_not_pulled(state)
        if pull_failure is not None:
            self._events.record(sandbox_ref(sandbox), Reason.IMAGE_NOT_PULLED, pull_failure)
            return on_node
        boundary = self._boundaries.observe(key, pod, state, profile.expected_boundary)
        unmet = self._boundaries.unmet(pod["metadata"]["uid"])
        if unmet:
            return replace(
                on_node, node_not_prepared=self._replace_unprepared(sandbox, pod, unmet, now)
            )
        if (
            boundary is not None
            and boundary != profile.expected_boundary
            and profile.expected_boundary is not None
        ):
            message = (
                f"pod {sandbox.namespace}/{pod['metadata']['name']} runs behind {boundary}, "
                f"not {profile.expected_boundary}; deleting it"
            )
            self._events.record(sandbox_ref(sandbox), Reason.BOUNDARY_MISMATCH, message)
            self._pods.delete(pod)
        return replace(on_node, observed_boundary=boundary)

    def _arm(self, sandbox: Sandbox, expiry: Expiry | None) -> None:
        """The loop reaps it at this moment (a deadline in the past: at its next pass)."""
        key = (sandbox.namespace, sandbox.name)
        if expiry is None:
            self._deadlines.disarm(key)
        else:
            self._deadlines.arm(key, expiry.expires_at)

    def _replace_dead_pod(
        self, sandbox: Sandbox, pod: dict[str, Any], state: PodState, denial: Denial | None
    ) -> None:
        """A dead sandbox pod is deleted; its deletion event brings a fresh one."""
        why = state.reason or f"exit code {state.exit_code}"
        self._events.record(
            sandbox_ref(sandbox),
            Reason.POD_FAILED,
            f"sandbox pod ended ({why}); replacing it with a new pod "
            "(files in /tmp, /workspace and running processes are lost)",
        )
        if denial is not None:
            record_denial(self._events, sandbox_ref(sandbox), denial)
        self._pods.delete(pod)

    def _replace_unprepared(
        self, sandbox: Sandbox, pod: dict[str, Any], unmet: tuple[str, ...], now: datetime
    ) -> str:
        """A pod its node did not prepare is never handed to the caller: it goes, and the
        next one waits out a hold and prefers another node."""
        node = pod["spec"].get("nodeName") or "(unknown)"
        message = (
            f"{not_prepared(node, unmet)}; the pod was deleted and a new one prefers another node"
        )
        self._events.record(sandbox_ref(sandbox), Reason.NODE_NOT_PREPARED, message)
        hold = self._unprepared.report(node, (sandbox.namespace, sandbox.name), message, now)
        self._requeue.after(
            (sandbox.namespace, sandbox.name), (hold.until - now).total_seconds() + 0.1
        )
        self._pods.delete(pod)
        return message

    def _release_pod_of_lost_node(
        self, sandbox: Sandbox, pod: Mapping[str, Any], node: str
    ) -> None:
        """Remove the API object of a pod its lost node cannot finish; its deletion event
        brings a new pod, on another node with the runtime or Unschedulable with why."""
        self._events.record(
            sandbox_ref(sandbox),
            Reason.POD_FAILED,
            f"node {node} was lost with the sandbox pod on it; replacing the pod on another "
            "node (files in /tmp, /workspace and running processes are lost)",
        )
        self._pods.delete(pod)

    def _write_status(self, sandbox: Sandbox, status: dict[str, Any]) -> None:
        if not status_changed(sandbox.status, status):
            return
        try:
            patched = self._kube.patch(
                sandbox_path(sandbox.namespace, sandbox.name, "status"),
                {"status": status_patch(sandbox.status, status)},
            )
        except Exception as error:
            if not is_not_found(error):
                raise
            return
        if self._cache is not None:
            # The next trigger compares against what was written, not the older copy.
            with contextlib.suppress(SandboxError):
                self._cache.refresh(parse_sandbox(patched))

    def _count_ready(self, sandbox: Sandbox, status: Mapping[str, Any], now: datetime) -> None:
        ready = any(
            c["type"] == ConditionType.READY and c["status"] == "True" for c in status["conditions"]
        )
        if ready and sandbox.uid not in self._ready_seen:
            self._ready_seen.add(sandbox.uid)
            metrics.CREATE_TO_READY.observe((now - sandbox.creation_timestamp).total_seconds())
