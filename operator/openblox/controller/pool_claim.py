"""Hand a warm pool pod to one Sandbox: one merge patch with the pod's resourceVersion.

The API server applies a patch carrying `metadata.resourceVersion` only to that exact
version of the pod, so of two hand-outs of one pod (two reconciles here, or two
operators) exactly one succeeds and the other gets 409. A lost race takes another pod,
and with none left the caller creates a cold pod as before: never anything weaker.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from openblox.builders.pod import claim_patch, is_owned_by
from openblox.builders.pod_state import PodState
from openblox.controller.kube import Kube, is_conflict, is_not_found, path, status_of
from openblox.controller.pool_store import PoolStore
from openblox.controller.watched import Watched, slim_pod
from openblox.models import Boundary, Profile, Sandbox
from openblox.names import LABEL_POOL
from openblox.pool.plan import choose_pod, pool_pod_view

log = logging.getLogger(__name__)

# Pods tried per claim before falling back to a cold create.
MAX_ATTEMPTS = 3


class PoolClaimer:
    def __init__(
        self,
        kube: Kube,
        watched: Watched,
        pools: PoolStore,
        boundary_of: Callable[[str], Boundary | None],
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        *,
        on_hand_out: Callable[[str, str], None] = lambda namespace, pool: None,
    ) -> None:
        self._kube = kube
        self._watched = watched
        self._pools = pools
        self._boundary_of = boundary_of
        self._clock = clock
        # Told (namespace, pool name) after each hand-out: the keeper paces refill by it.
        self._on_hand_out = on_hand_out
        self._lock = threading.Lock()
        # Pods a hand-out in this process is patching now: another reconcile picks another.
        self._taken: set[tuple[str, str]] = set()

    def serves(self, profile: str, namespace: str) -> bool:
        return bool(self._pools.serving(profile, namespace))

    def claim(self, sandbox: Sandbox, profile: Profile) -> dict[str, Any] | None:
        """The warm pod now owned by this Sandbox, or None: take the cold path."""
        serving = {pool.name for pool in self._pools.serving(profile.name, sandbox.namespace)}
        if not serving:
            return None
        tried: set[str] = set()
        for _ in range(MAX_ATTEMPTS):
            pod = self._reserve(sandbox.namespace, serving, profile, tried)
            if pod is None:
                return None
            name = pod["metadata"]["name"]
            tried.add(name)
            try:
                claimed = self._patch(pod, sandbox, profile)
            finally:
                with self._lock:
                    self._taken.discard((sandbox.namespace, name))
            if claimed is not None:
                log.info(
                    "handed pool pod %s/%s to Sandbox %s", sandbox.namespace, name, sandbox.name
                )
                self._on_hand_out(sandbox.namespace, str(pod["metadata"]["labels"][LABEL_POOL]))
                return claimed
        return None

    def _reserve(
        self, namespace: str, serving: set[str], profile: Profile, tried: set[str]
    ) -> dict[str, Any] | None:
        pods = {
            pod["metadata"]["name"]: pod
            for pod in self._watched.pool_pods()
            if pod["metadata"].get("namespace") == namespace
            and pod["metadata"]["labels"].get(LABEL_POOL) in serving
        }
        views = [
            pool_pod_view(pod, self._boundary_of(pod["metadata"]["uid"]), profile.expected_boundary)
            for pod in pods.values()
        ]
        with self._lock:
            taken = tried | {name for ns, name in self._taken if ns == namespace}
            chosen = choose_pod(views, profile.digest, taken)
            if chosen is None:
                return None
            self._taken.add((namespace, chosen.name))
        return pods[chosen.name]

    def _patch(
        self, pod: dict[str, Any], sandbox: Sandbox, profile: Profile
    ) -> dict[str, Any] | None:
        target = path(plural="pods", namespace=sandbox.namespace, name=pod["metadata"]["name"])
        for fresh in (False, True):
            try:
                patched = self._kube.patch(
                    target, claim_patch(pod, sandbox, profile, self._clock())
                )
            except Exception as error:
                if is_not_found(error):
                    return None
                if not is_conflict(error) or fresh:
                    if is_conflict(error) or status_of(error) == 422:
                        return None  # taken, or no longer a pod that can be handed out
                    raise
                # The pod changed since the watch showed it (a status update, or another
                # hand-out): read it once; if it is still in the pool, try that version.
                current = self._kube.get(target)
                self._watched.pod_seen(current)
                if is_owned_by(current, sandbox):
                    # Handed to this very Sandbox already, by a hand-out whose answer
                    # never came (a replaced operator's, landing late): it is ours.
                    return slim_pod(current)
                labels = (current.get("metadata") or {}).get("labels") or {}
                if (
                    not labels.get(LABEL_POOL)
                    or current["metadata"].get("ownerReferences")
                    or not PodState.from_pod(current).ready
                ):
                    return None
                pod = slim_pod(current)
                continue
            self._watched.pod_seen(patched)
            return slim_pod(patched)
        return None
