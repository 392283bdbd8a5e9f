"""Find, hand out or create the one pod of a Sandbox.

A cold pod is named after its Sandbox, so a retried create finds it (409) instead of
making another; a warm pod handed out from a pool keeps the pool's name. Both are found
by their controller ownerReference, never by guessing a name.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from openblox.builders.pod import (
    build_pod,
    is_left_by_namesake,
    is_owned_by,
    pod_name,
    rank_owned_pods,
)
from openblox.controller.kube import Kube, is_conflict, is_not_found, path, refusal_reason
from openblox.controller.pool_claim import PoolClaimer
from openblox.controller.watched import Watched, slim_pod
from openblox.models import Profile, Sandbox
from openblox.names import LABEL_SANDBOX
from openblox.transport import BadRequest, Forbidden, Invalid

log = logging.getLogger(__name__)


class PodRefused(Exception):
    """The API server refused to create the Sandbox's pod as it stands: an admission
    policy or webhook, a ResourceQuota or LimitRange, validation. Its words are the
    message; the same pod is asked for again later (a quota may free up)."""


class SandboxPods:
    def __init__(
        self,
        kube: Kube,
        watched: Watched,
        *,
        claimer: PoolClaimer | None = None,
        sole_hand_out: Callable[[Sandbox], bool] = lambda sandbox: False,
    ) -> None:
        self._kube = kube
        self._watched = watched
        # Hands out warm pool pods; without it (or with no pool) every pod is made cold.
        self._claimer = claimer
        # True when no replica but this one can have handed the Sandbox a pod (it has
        # held the Lease since before the Sandbox was made): each hand-out's answer then
        # reached this process, and no read is needed to find one.
        self._sole_hand_out = sole_hand_out
        # Sandboxes whose hand-out here raised instead of answering: it may have landed.
        self._unanswered: set[str] = set()

    def read(self, sandbox: Sandbox) -> dict[str, Any] | None:
        """The Sandbox's pod as the pod watch last showed it (no request)."""
        owned = self.owned(sandbox)
        return owned[0] if owned else None

    def owned(self, sandbox: Sandbox) -> list[dict[str, Any]]:
        """The pods this Sandbox controls, the one it keeps first (`rank_owned_pods`).

        A cold pod is named after its Sandbox and a warm one keeps its pool's name, so
        they are found by owner, not by name."""
        owned = self._watched.pod_owned_by(sandbox.namespace, sandbox.uid)
        named = sandbox.status.get("podName") if sandbox.status else None
        return rank_owned_pods(owned, named)

    def ensure(
        self,
        sandbox: Sandbox,
        profile: Profile,
        now: datetime,
        avoid_nodes: frozenset[str] = frozenset(),
    ) -> tuple[dict[str, Any] | None, str | None]:
        """The Sandbox's pod: a warm one handed out from a pool, else one created cold; or
        a conflict message if the cold pod's name is taken.

        The pod watch's copy is used when there is one; otherwise the pod is created
        straight away (no read first), and a 409 is answered by one read.
        """
        owned = self.owned(sandbox)
        # One pod per Sandbox. Two can only come from two operators handing out at once
        # (a replaced one's hand-out landing late; each pod still to one Sandbox only);
        # the extra one goes.
        self.end(sandbox, owned[1:], "it has a second pod", logging.WARNING)
        if owned:
            return owned[0], None
        found = self._watched.pod(sandbox.namespace, pod_name(sandbox))
        if found is None:
            claimed = self._claim_warm_pod(sandbox, profile)
            if claimed is not None:
                return claimed, None
            pods = path(plural="pods", namespace=sandbox.namespace)
            try:
                created = self._kube.post(
                    pods, build_pod(sandbox, profile, now=now, avoid_nodes=avoid_nodes)
                )
                log.info("created pod %s/%s", sandbox.namespace, pod_name(sandbox))
                self._watched.pod_seen(created)
                return slim_pod(created), None
            except (BadRequest, Forbidden, Invalid) as error:
                raise PodRefused(
                    f"the API server refused the pod: {refusal_reason(error)}"
                ) from error
            except Exception as error:
                if not is_conflict(error):
                    raise
            existing = self._kube.get(f"{pods}/{pod_name(sandbox)}")
            self._watched.pod_seen(existing)
            found = slim_pod(existing)
        if not is_owned_by(found, sandbox):
            if is_left_by_namesake(found, sandbox):
                # Deleted and made again under the same name: the old pod goes now rather
                # than when the garbage collector comes; its deletion event brings ours.
                if not found["metadata"].get("deletionTimestamp"):
                    self.delete(found)
                return None, None
            return None, (
                f'a pod named "{pod_name(sandbox)}" already exists in '
                f'"{sandbox.namespace}" and does not belong to this Sandbox'
            )
        return found, None

    def _claim_warm_pod(self, sandbox: Sandbox, profile: Profile) -> dict[str, Any] | None:
        claimer = self._claimer
        if claimer is None or not claimer.serves(profile.name, sandbox.namespace):
            return None
        if sandbox.uid in self._unanswered or not self._sole_hand_out(sandbox):
            # A hand-out whose answer never came (an earlier operator was killed, or the
            # request here failed) may have left a pod this Sandbox owns that the watch
            # has not shown yet: one read by label finds it, so none is handed out twice.
            listing = self._kube.get(
                path(plural="pods", namespace=sandbox.namespace),
                labelSelector=f"{LABEL_SANDBOX}={sandbox.name}",
            )
            for pod in listing.get("items") or []:
                self._watched.pod_seen(pod)
            self._unanswered.discard(sandbox.uid)
            owned = self.owned(sandbox)
            if owned:
                return owned[0]
        try:
            return claimer.claim(sandbox, profile)
        except Exception:
            self._unanswered.add(sandbox.uid)
            raise

    def end(
        self,
        sandbox: Sandbox,
        pods: list[dict[str, Any]],
        why: str,
        level: int = logging.INFO,
    ) -> None:
        """Delete each of these pods of the Sandbox that is not going already, saying why."""
        for pod in pods:
            if pod["metadata"].get("deletionTimestamp"):
                continue
            log.log(
                level,
                "Sandbox %s/%s: %s; deleting pod %s",
                sandbox.namespace,
                sandbox.name,
                why,
                pod["metadata"]["name"],
            )
            self.delete(pod)

    def forget(self, uid: str) -> None:
        self._unanswered.discard(uid)

    def delete(self, pod: Mapping[str, Any], *, only_as_seen: bool = False) -> None:
        delete_pod(self._kube, pod, only_as_seen=only_as_seen)


def delete_pod(kube: Kube, pod: Mapping[str, Any], *, only_as_seen: bool = False) -> None:
    """Delete this pod (not a namesake made since); `only_as_seen`: only if it has not
    changed since this copy (a pool pod handed out meanwhile is not deleted: 409)."""
    metadata = pod["metadata"]
    preconditions = {"uid": metadata["uid"]}
    if only_as_seen:
        preconditions["resourceVersion"] = metadata["resourceVersion"]
    try:
        kube.delete(
            path(plural="pods", namespace=metadata["namespace"], name=metadata["name"]),
            {"gracePeriodSeconds": 0, "preconditions": preconditions},
        )
    except Exception as error:
        if not (is_not_found(error) or is_conflict(error)):
            raise
