"""Whether a profile's runtime can run here, and whether the node failed to start it.

Fail closed: a RuntimeClass that does not exist, Kata without asserted NetworkPolicy
enforcement, or a node with no runtime for the handler each give a reason, and nothing
is started under another runtime.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from openblox.controller.kube import Kube, is_not_found, path
from openblox.controller.requeue import Requeue
from openblox.controller.watched import Watched
from openblox.models import Profile
from openblox.names import RUNTIME_CLASS_KATA
from openblox.timestamps import parse_timestamp

# A pod still Pending after this long has its events read for a runtime failure.
PENDING_GRACE_SECONDS = 3.0
# A node's reported runtime handlers are read again after this long.
NODE_TTL_SECONDS = 60.0
# containerd's words for a RuntimeClass handler it has no runtime for.
MISSING_HANDLER = "no runtime for"


def network_policy_enforced() -> bool:
    """Whether the admin has confirmed that this cluster enforces NetworkPolicy."""
    return os.environ.get("OPENBLOX_NETWORK_POLICY_ENFORCED", "false") == "true"


class RuntimeChecks:
    """Whether a profile's runtime can run here, as the RuntimeClass watch shows it.

    Built once and shared: the reconcile and the pool keeper ask the same question."""

    def __init__(
        self,
        kube: Kube,
        watched: Watched,
        *,
        network_policy_enforced: bool,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._kube = kube
        self._watched = watched
        self._network_policy_enforced = network_policy_enforced
        self._clock = clock
        # Node name -> (when read, the runtime handlers it reports; None: it reports none).
        self._node_handlers: dict[str, tuple[float, frozenset[str] | None]] = {}
        self._swept = clock()

    def problem(self, profile: Profile) -> str | None:
        """Why this profile's pods cannot run here (None: they can)."""
        name = profile.runtime_class_name
        exists = self._watched.runtime_class_exists(name)
        if exists is None:
            try:
                body = self._kube.get(path(group="node.k8s.io", plural="runtimeclasses", name=name))
                self._watched.runtime_class_seen(name, str(body.get("handler") or ""))
                exists = True
            except Exception as error:
                if not is_not_found(error):
                    raise
                self._watched.runtime_class_gone(name)
                exists = False
        if not exists:
            return (
                f'RuntimeClass "{profile.runtime_class_name}" does not exist in this '
                "cluster; refusing to run the sandbox under any other runtime"
            )
        if profile.runtime_class_name == RUNTIME_CLASS_KATA and not self._network_policy_enforced:
            return (
                "Kata profiles need NetworkPolicy enforcement (under Kata the policy is the "
                "only network layer) and this cluster has not confirmed it "
                "(OPENBLOX_NETWORK_POLICY_ENFORCED)"
            )
        return None

    def creation_failure(
        self,
        requeue: Requeue,
        key: tuple[str, str],
        pod: Mapping[str, Any],
        profile: Profile,
        now: datetime,
    ) -> str | None:
        """The node could not create the pod's sandbox for want of the runtime's handler;
        the retries are keyed by the Sandbox `key`, not by its pod.

        Only a Pending pod on a node can meet that, and only on a node that does not
        report the handler among its runtime handlers (kubelets from 1.30 report them):
        its events are read then. A pod waiting for a node, or on a node that has the
        handler, costs no request, which matters with many pods Pending at once (each
        read is a list of its namespace's events)."""
        if (pod.get("status") or {}).get("phase") != "Pending":
            requeue.settled(key)
            return None
        node = (pod.get("spec") or {}).get("nodeName")
        if not node:
            return None  # its binding is a pod event, which brings the next reconcile
        handler = self._watched.runtime_class_handler(profile.runtime_class_name)
        if handler is not None and handler in (self._handlers_of(str(node)) or ()):
            requeue.settled(key)
            return None
        return sandbox_creation_failure(self._kube, requeue, key, pod, now)

    def _handlers_of(self, node: str) -> frozenset[str] | None:
        """The runtime handlers the node reports, read again after NODE_TTL_SECONDS."""
        read = self._node_handlers.get(node)
        if read is None or self._clock() - read[0] > NODE_TTL_SECONDS:
            self._forget_stale_nodes()
            try:
                body = self._kube.get(path(plural="nodes", name=node))
            except Exception as error:
                if not is_not_found(error):
                    raise
                return None
            reported = (body.get("status") or {}).get("runtimeHandlers")
            names = (
                frozenset(str(h.get("name")) for h in reported if isinstance(h, dict))
                if isinstance(reported, list) and reported
                else None
            )
            read = (self._clock(), names)
            self._node_handlers[node] = read
        return read[1]

    @property
    def nodes_remembered(self) -> int:
        return len(self._node_handlers)

    def _forget_stale_nodes(self) -> None:
        """Drop what nodes reported longer ago than NODE_TTL_SECONDS, at most once per
        that time: nodes come and go (autoscaling, replaced machines), and one no pod
        asks about again would otherwise be remembered for the operator's whole life."""
        now = self._clock()
        if now - self._swept <= NODE_TTL_SECONDS:
            return
        self._swept = now
        for name, (when, _) in list(self._node_handlers.items()):
            if now - when > NODE_TTL_SECONDS:
                del self._node_handlers[name]


def sandbox_creation_failure(
    kube: Kube, requeue: Requeue, key: tuple[str, str], pod: Mapping[str, Any], now: datetime
) -> str | None:
    """The kubelet could not create the pod sandbox (for instance, no such handler); the
    retries are keyed by the Sandbox `key`, not by its pod."""
    created = pod["metadata"].get("creationTimestamp")
    age = (now - parse_timestamp(created)).total_seconds() if created else PENDING_GRACE_SECONDS
    if age < PENDING_GRACE_SECONDS:
        # No pod event may come if the node cannot make the pod's sandbox: look then.
        requeue.after(key, PENDING_GRACE_SECONDS - age)
        return None
    events = kube.get(
        path(plural="events", namespace=pod["metadata"]["namespace"]),
        fieldSelector=f"involvedObject.uid={pod['metadata']['uid']},reason=FailedCreatePodSandBox",
    )
    for event in events.get("items") or []:
        # Only a handler the node lacks is final; anything else (a shim that timed
        # out on a loaded node) the kubelet retries, and the pod stays Pending.
        message = event.get("message") or ""
        if MISSING_HANDLER in message:
            requeue.settled(key)
            return f"the node could not start the pod's runtime: {message}"
    requeue.after(key, PENDING_GRACE_SECONDS)
    return None
