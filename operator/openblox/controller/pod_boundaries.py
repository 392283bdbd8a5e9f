"""The boundary each sandbox pod runs behind: probed once, kept for the pod's lifetime.

A pod's kernel does not change while it lives, so one conclusive probe (`boundary.py`)
decides for good. The verdict is also written on the pod (`openblox.sh/boundary`, with a
uid precondition), so a replica that takes the Lease later trusts it rather than probing
every pod again, and a warm pod's probe, run before its hand-out, carries over.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from openblox.builders.pod import unsealed_boundary_patch
from openblox.builders.pod_state import PodState
from openblox.controller.boundary import probe_boundary
from openblox.controller.kube import Kube, is_conflict, is_not_found, path
from openblox.controller.requeue import Requeue
from openblox.controller.watched import Watched
from openblox.models.node_preparation import requirements_of
from openblox.models.profile import Boundary
from openblox.names import ANNOTATION_BOUNDARY, LABEL_UNVERIFIED

log = logging.getLogger(__name__)

# An inconclusive boundary probe is tried again after this long.
PROBE_RETRY_SECONDS = 5.0


class PodBoundaries:
    def __init__(self, kube: Kube, watched: Watched, requeue: Requeue) -> None:
        self._kube = kube
        self._watched = watched
        self._requeue = requeue
        # Pod uid -> boundary seen inside it.
        self._seen: dict[str, Boundary] = {}
        # Pod uid -> what its node failed to give it; such a pod is never verified.
        self._unprepared: dict[str, tuple[str, ...]] = {}
        self._node_kernels: dict[str, str] = {}

    def of(self, pod_uid: str) -> Boundary | None:
        """What the boundary probe saw in this pod (None: not probed yet, or its node did
        not give it what a sandbox needs: such a pod is never handed out)."""
        return self._seen.get(pod_uid)

    def unmet(self, pod_uid: str) -> tuple[str, ...]:
        """What the probe found the pod's node failed to give it (empty: nothing, or not
        probed yet)."""
        return self._unprepared.get(pod_uid, ())

    def forget(self, pod_uid: str) -> None:
        self._seen.pop(pod_uid, None)
        self._unprepared.pop(pod_uid, None)

    def observe(
        self,
        key: tuple[str, str] | None,
        pod: Mapping[str, Any],
        state: PodState,
        expected: Boundary | None,
    ) -> Boundary | None:
        """The probed boundary of the pod; an inconclusive probe requeues the Sandbox `key`
        (None, for a pool pod no Sandbox holds yet: its keeper looks again). A pod whose
        node did not prepare it has no boundary here (see `unmet`)."""
        uid = pod["metadata"]["uid"]
        # The probe needs a running container, not the kubelet's report of it: the
        # `Started` Event comes up to a relist (a second) before the pod reads Ready.
        early = not state.ready
        if early and not self._watched.has_started(uid):
            return None
        recorded = (pod["metadata"].get("annotations") or {}).get(ANNOTATION_BOUNDARY)
        if uid not in self._seen and recorded in ("gvisor", "kata"):
            # A warm pod's probe ran before its hand-out, perhaps in an earlier operator;
            # only the operator may write a sandbox pod, so the record is its own.
            self._seen[uid] = recorded
        if uid in self._unprepared:
            return None
        if uid not in self._seen:
            node = pod["spec"].get("nodeName")
            try:
                observed = probe_boundary(
                    self._kube,
                    pod["metadata"]["namespace"],
                    pod["metadata"]["name"],
                    self._node_kernel(node),
                    requirements_of(pod, expected),
                )
            except Exception:
                if not early:
                    raise
                observed = None
            if observed is None:
                if early:
                    # Decides nothing; the pod's Ready brings the probe again.
                    log.info("early boundary probe of %s undecided", pod["metadata"]["name"])
                    return None
                # Inconclusive: probed again shortly.
                if key is not None:
                    self._requeue.after(key, PROBE_RETRY_SECONDS)
                return None
            if observed.unmet and observed.boundary == expected:
                # Another boundary than the profile's is the graver finding (mismatch).
                self._unprepared[uid] = observed.unmet
                return None
            self._seen[uid] = observed.boundary
        boundary = self._seen[uid]
        sealed = LABEL_UNVERIFIED in (pod["metadata"].get("labels") or {})
        if key is not None and boundary in ("gvisor", "kata") and (recorded != boundary or sealed):
            # Also when an earlier write of it failed: the pod stays sealed until it lands.
            self.record(pod, boundary)
        return boundary

    def record(self, pod: Mapping[str, Any], observed: Boundary) -> None:
        """Write the probe's result on the pod (the pool keeper does it for a warm pod) and
        unseal it for callers; a replica that takes the Lease later trusts the record
        instead of probing every pod again
        (a probe of a pod whose node has just frozen hangs until its timeout, and holds
        that Sandbox's reconciles, its NodeLost report among them, back meanwhile)."""
        metadata = pod["metadata"]
        try:
            annotated = self._kube.patch(
                path(plural="pods", namespace=metadata["namespace"], name=metadata["name"]),
                unsealed_boundary_patch(pod, observed),
            )
        except Exception as error:
            if not (is_not_found(error) or is_conflict(error)):
                raise
            return
        self._watched.pod_seen(annotated)

    def _node_kernel(self, node: str) -> str:
        if node not in self._node_kernels:
            body = self._kube.get(path(plural="nodes", name=node))
            self._node_kernels[node] = str(body["status"]["nodeInfo"]["kernelVersion"])
        return self._node_kernels[node]
