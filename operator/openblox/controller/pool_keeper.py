"""Keep each warm pool at its size: create pool pods at a bounded rate, probe their
boundary, and delete the ones that may no longer be handed out.

It runs in one replica only, while this replica holds the operator's Lease (`held` is
the election's `leading`; a write sent after the Lease is lost is refused by the fence).
A pool pod is deleted when its profile changed (old digest), its boundary probe failed, it ended,
the pool shrank, or it no longer serves anything: the pool or its profile was removed,
or its namespace opted out or is no longer allowed the profile. Each deletion is of the
version the pass saw: a pod handed out since (by a reconcile here, or a hand-out of a
replaced operator landing late) has changed, so the API server refuses it (409).
"""

from __future__ import annotations

import logging
import secrets
import string
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from openblox.builders.pod import build_pool_pod
from openblox.builders.pod_state import PodState
from openblox.controller.election import NotLeader
from openblox.controller.kube import (
    Kube,
    is_conflict,
    is_not_found,
    path,
    refusal_reason,
    status_of,
)
from openblox.controller.namespaces import Namespaces
from openblox.controller.pod_boundaries import PodBoundaries
from openblox.controller.pool_store import PoolStore
from openblox.controller.profile_store import ProfileStore
from openblox.controller.runtime_checks import RuntimeChecks
from openblox.controller.sandbox_pods import delete_pod
from openblox.controller.unprepared_nodes import UnpreparedNodes, not_prepared
from openblox.controller.watched import Watched
from openblox.models import Boundary, OpenbloxError, Profile, resolve_profile
from openblox.models.pool import Pool
from openblox.names import LABEL_POOL, Reason
from openblox.pool.plan import (
    RefillPacer,
    can_hand_out,
    plan_pool,
    pod_footprint,
    pods_per_quota,
    pool_pod_view,
)

log = logging.getLogger(__name__)

# ResourceQuotas and RuntimeClass overheads change rarely: read again after this long.
QUOTA_TTL_SECONDS = 30.0
# Boundary probes run at once, beside the passes: each is an exec that mostly waits on
# the node. A pass that probed one pod after another made pods hand-out-able at a probe's
# pace, and one that waited for its probes held its pool's creates back by a probe's time.
PROBES_AT_ONCE = 4

Key = tuple[str, str]  # (namespace, pool name)


class PoolKeeper:
    def __init__(
        self,
        kube: Kube,
        watched: Watched,
        pools: PoolStore,
        profiles: ProfileStore,
        *,
        namespaces: Namespaces,
        runtimes: RuntimeChecks,
        boundaries: PodBoundaries,
        unprepared: UnpreparedNodes,
        held: Callable[[], bool],
        wake: threading.Event | None = None,
        pacer: RefillPacer | None = None,
        interval_seconds: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._kube = kube
        self._watched = watched
        self._pools = pools
        self._profiles = profiles
        self._namespaces = namespaces
        self._runtimes = runtimes
        self._boundaries = boundaries
        self._unprepared = unprepared
        self._held = held
        self._pacer = pacer or RefillPacer()
        self._interval = interval_seconds
        self._clock = clock
        # Set by whatever a pool waits for (`nudge`; the pool store when the pools change).
        self._wake = wake if wake is not None else threading.Event()
        self._listed = False
        self._quotas: dict[str, tuple[float, list[dict[str, Any]]]] = {}
        self._overheads: dict[str, tuple[float, dict[str, str]]] = {}
        self._probes = ThreadPoolExecutor(PROBES_AT_ONCE, thread_name_prefix="pool-probe")
        self._probing: set[str] = set()  # uids of pods whose probe is queued or running
        self._probing_guard = threading.Lock()
        self._hand_outs: dict[str, float] = {}
        self._hand_outs_guard = threading.Lock()

    def handed_out(self, namespace: str, pool: str) -> None:
        """A pod of this pool was just handed to a Sandbox (the claim, in a reconcile)."""
        with self._hand_outs_guard:
            self._hand_outs[f"{namespace}/{pool}"] = self._clock()

    def nudge(self) -> None:
        """Something a pool waits for changed (a pool pod became Ready, a profile, a pool)."""
        self._wake.set()

    def run(self, stop: threading.Event) -> None:
        try:
            self._run(stop)
        finally:
            self._probes.shutdown(wait=False, cancel_futures=True)

    def _run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self._wake.wait(self._interval)
            self._wake.clear()
            if stop.is_set() or not self._held():
                continue
            try:
                self.run_once()
            except NotLeader:
                log.info("lost the Lease during a pool pass; the keeper stands by")
            except Exception:
                log.exception("pool pass failed; trying again next interval")

    # ------------------------------------------------------------------ one pass

    def run_once(self) -> None:
        if not (self._pools.loaded() and self._profiles.loaded()):
            return  # an unread ConfigMap would look like pools removed, and their pods go
        if not self._listed:
            # The pod watch may not have delivered every pool pod yet after a start:
            # without this list the pass would make a pool's pods again.
            listing = self._kube.get(path(plural="pods"), labelSelector=LABEL_POOL)
            for pod in listing.get("items") or []:
                self._watched.pod_seen(pod)
            self._listed = True
        desired = self._desired()
        pods: dict[Key, list[dict[str, Any]]] = defaultdict(list)
        for pod in self._watched.pool_pods():
            metadata = pod["metadata"]
            pods[(metadata["namespace"], metadata["labels"][LABEL_POOL])].append(pod)
        for key, orphans in pods.items():
            if key not in desired:
                for pod in orphans:
                    if not pod["metadata"].get("deletionTimestamp"):
                        log.info(
                            "pool pod %s/%s serves no pool now; deleting it",
                            key[0],
                            pod["metadata"]["name"],
                        )
                        delete_pod(self._kube, pod, only_as_seen=True)
        gone = [f"{ns}/{name}" for ns, name in set(pods) - set(desired)]
        self._pacer.forget(gone)
        with self._hand_outs_guard:
            for pacer_key in gone:
                self._hand_outs.pop(pacer_key, None)
        for key, (pool, profile, size) in desired.items():
            self._keep(key, pool, profile, size, pods.get(key, []))

    def _desired(self) -> dict[Key, tuple[Pool, Profile, int]]:
        desired: dict[Key, tuple[Pool, Profile, int]] = {}
        for pool in self._pools.pools():
            profile = self._profiles.get(pool.profile)
            if profile is None:
                self._pools.record(
                    Reason.POOL_PROFILE_NOT_FOUND,
                    f'pool "{pool.name}" names profile "{pool.profile}", which does not exist '
                    f"(profiles: {', '.join(self._profiles.names()) or 'none'}); it keeps no pods",
                )
                continue
            for namespace in pool.namespaces:
                if self._serves(pool, profile, namespace):
                    desired[(namespace, pool.name)] = (
                        pool,
                        profile,
                        self._size(pool, profile, namespace),
                    )
        return desired

    def _serves(self, pool: Pool, profile: Profile, namespace: str) -> bool:
        try:
            labels = self._namespaces.labels(namespace)
        except Exception as error:
            if not is_not_found(error):
                raise
            self._pools.record(
                Reason.POOL_REFUSED,
                f'pool "{pool.name}": namespace "{namespace}" does not exist; '
                "it keeps no pods there",
            )
            return False
        try:
            resolve_profile(profile.name, namespace, labels, {profile.name: profile}, {})
        except OpenbloxError as error:
            self._pools.record(
                Reason.POOL_REFUSED,
                f'pool "{pool.name}" keeps no pods in "{namespace}": {error.message}',
            )
            return False
        problem = self._runtimes.problem(profile)
        if problem:
            self._pools.record(Reason.POOL_REFUSED, f'pool "{pool.name}" keeps no pods: {problem}')
            return False
        return True

    def _size(self, pool: Pool, profile: Profile, namespace: str) -> int:
        """The pool's size, or less if a ResourceQuota of the namespace holds fewer such pods."""
        requests, limits = pod_footprint(
            build_pool_pod(pool, namespace, profile, "x"),
            self._overhead(profile.runtime_class_name),
        )
        size = pool.size
        for quota in self._quotas_of(namespace):
            hard = (quota.get("spec") or {}).get("hard") or {}
            fits = pods_per_quota(hard, requests, limits)
            if fits is not None and fits < size:
                self._pools.record(
                    Reason.POOL_EXCEEDS_QUOTA,
                    f'pool "{pool.name}" asks for {pool.size} pods in namespace "{namespace}", '
                    f'but its ResourceQuota "{quota["metadata"]["name"]}" holds at most {fits} '
                    f'"{profile.name}" pods; keeping {fits}',
                )
                size = fits
        return size

    def _keep(
        self, key: Key, pool: Pool, profile: Profile, size: int, pods: list[dict[str, Any]]
    ) -> None:
        namespace = key[0]
        by_name = {pod["metadata"]["name"]: pod for pod in pods}
        expected = profile.expected_boundary
        views = [
            pool_pod_view(pod, self._boundaries.of(pod["metadata"]["uid"]), expected)
            for pod in pods
        ]
        starting = sum(1 for v in views if v.starting and v.digest == profile.digest)
        pacer_key = f"{namespace}/{pool.name}"
        with self._hand_outs_guard:
            handed_out_at = self._hand_outs.get(pacer_key)
        allowance = self._pacer.allowance(
            pacer_key,
            self._clock(),
            starting,
            handed_out_at=handed_out_at,
            ready=sum(1 for v in views if can_hand_out(v, profile.digest)),
        )
        plan = plan_pool(size, views, profile.digest, allowance)
        for view in views:
            if view.name in plan.delete and view.boundary_ok is False:
                self._pools.record(
                    Reason.POOL_POD_FAILED,
                    f'pool pod {namespace}/{view.name} does not run behind "{expected}"; '
                    "it was never handed out and is deleted",
                )
        for name in plan.delete:
            log.info("deleting pool pod %s/%s", namespace, name)
            delete_pod(self._kube, by_name[name], only_as_seen=True)
        for name in plan.probe:
            self._start_probe(by_name[name], pool, expected)
        held = self._unprepared.held(_hold_key(namespace, pool), datetime.now(UTC))
        if plan.create and held is None:
            self._create(pool, profile, namespace, plan.create, pacer_key)

    def _start_probe(self, pod: dict[str, Any], pool: Pool, expected: Boundary | None) -> None:
        """Probe the pod on a probe thread unless its probe is under way; the pass goes on."""
        uid = pod["metadata"]["uid"]
        with self._probing_guard:
            if uid in self._probing:
                return
            self._probing.add(uid)
        try:
            self._probes.submit(self._probe_once, uid, pod, pool, expected)
        except RuntimeError:  # shut down: the keeper is stopping
            with self._probing_guard:
                self._probing.discard(uid)

    def _probe_once(
        self, uid: str, pod: dict[str, Any], pool: Pool, expected: Boundary | None
    ) -> None:
        name = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        try:
            self._probe(pod, pool, expected)
        except NotLeader:
            log.info("lost the Lease during the probe of pool pod %s", name)
        except Exception:
            log.exception("probe of pool pod %s failed; probed again on a later pass", name)
        finally:
            with self._probing_guard:
                self._probing.discard(uid)

    def _probe(self, pod: dict[str, Any], pool: Pool, expected: Boundary | None) -> None:
        """The same checks a cold pod gets, before the pod may be handed out."""
        self._boundaries.observe(None, pod, PodState.from_pod(pod), expected)
        unmet = self._boundaries.unmet(pod["metadata"]["uid"])
        if unmet:
            self._replace_unprepared(pod, pool, unmet)
            return
        observed = self._boundaries.of(pod["metadata"]["uid"])
        if observed is None:
            return  # inconclusive: probed again on a later pass
        self._wake.set()  # hand-out-able now, or to be deleted: act on it next pass
        if expected is not None and observed != expected:
            return
        self._boundaries.record(pod, observed)

    def _replace_unprepared(self, pod: dict[str, Any], pool: Pool, unmet: tuple[str, ...]) -> None:
        """Never handed out; the pool makes its next pod after a hold, elsewhere if it can."""
        metadata = pod["metadata"]
        node = pod["spec"].get("nodeName") or "(unknown)"
        message = (
            f"pool pod {metadata['namespace']}/{metadata['name']}: {not_prepared(node, unmet)}; "
            "it was never handed out and is deleted"
        )
        self._pools.record(Reason.NODE_NOT_PREPARED, message)
        self._unprepared.report(
            node, _hold_key(metadata["namespace"], pool), message, datetime.now(UTC)
        )
        delete_pod(self._kube, pod, only_as_seen=True)
        self._wake.set()

    def _create(
        self, pool: Pool, profile: Profile, namespace: str, count: int, pacer_key: str
    ) -> None:
        self._namespaces.prepare(namespace)
        avoid = self._unprepared.avoided(datetime.now(UTC))
        for _ in range(count):
            body = build_pool_pod(pool, namespace, profile, _suffix(), avoid)
            try:
                created = self._kube.post(path(plural="pods", namespace=namespace), body)
            except Exception as error:
                if is_conflict(error):
                    continue  # the name was taken (1 in 36**5): the next pass makes another
                if status_of(error) != 403:
                    raise
                # The API server's quota is the last word: the pool waits for room.
                # Without the pod's random name, so each pass's refusal is one Event.
                self._pools.record(
                    Reason.POOL_EXCEEDS_QUOTA,
                    f'pool "{pool.name}" cannot add a pod in "{namespace}": '
                    f"{refusal_reason(error)}",
                )
                return
            self._pacer.spend(pacer_key, 1)
            self._watched.pod_seen(created)
            log.info("created pool pod %s/%s", namespace, created["metadata"]["name"])

    # ------------------------------------------------------------------ reads, kept a while

    def _quotas_of(self, namespace: str) -> list[dict[str, Any]]:
        now = self._clock()
        cached = self._quotas.get(namespace)
        if cached is None or now - cached[0] > QUOTA_TTL_SECONDS:
            listing = self._kube.get(path(plural="resourcequotas", namespace=namespace))
            cached = (now, list(listing.get("items") or []))
            self._quotas[namespace] = cached
        return cached[1]

    def _overhead(self, runtime_class: str) -> Mapping[str, str]:
        now = self._clock()
        cached = self._overheads.get(runtime_class)
        if cached is None or now - cached[0] > QUOTA_TTL_SECONDS:
            body = self._kube.get(
                path(group="node.k8s.io", plural="runtimeclasses", name=runtime_class)
            )
            fixed = ((body.get("overhead") or {}).get("podFixed")) or {}
            cached = (now, {str(k): str(v) for k, v in fixed.items()})
            self._overheads[runtime_class] = cached
        return cached[1]


def _hold_key(namespace: str, pool: Pool) -> tuple[str, str]:
    """A pool's hold, beside its Sandboxes' (a colon is in no Sandbox's name)."""
    return (namespace, f"pool:{pool.name}")


def _suffix() -> str:
    alphabet = string.ascii_lowercase + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(5))
