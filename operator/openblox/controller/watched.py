"""What the watches have told the operator about the world around its Sandboxes.

Each reconcile used to read the Namespace, the RuntimeClass and the pod from the API
server, and create the NetworkPolicy, whatever had changed. Now the watches keep:

- Namespaces: name -> labels (profiles are allowed by namespace label).
- RuntimeClasses: the names that exist.
- NetworkPolicies: the namespaces that hold the operator's default-deny policy.
- Sandbox pods: a slim copy (only the fields the reconcile and the denials read).

Only small, typed pieces are kept, never full bodies (managedFields alone are larger than
everything kept here). A miss (an object the watch has not delivered yet, say just after
start) falls back to one read, whose answer is kept; a negative answer is kept only for
NEGATIVE_TTL_SECONDS, in case a watch event was lost.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from openblox.models.resource_version import is_older
from openblox.names import (
    ANNOTATION_BOUNDARY,
    ANNOTATION_PROFILE_DIGEST,
    CONTAINER_NAME,
    LABEL_POOL,
    LABEL_SANDBOX,
    LABEL_UNVERIFIED,
)

NEGATIVE_TTL_SECONDS = 30.0
# How long a deleted pod's uid is remembered, so that an answer to one of our own writes
# that comes back after the pod's deletion event cannot bring the pod back into the cache.
GONE_MEMORY_SECONDS = 300.0


def slim_pod(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a pod that the reconcile, the conditions and the denials read."""
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    annotations = metadata.get("annotations") or {}
    kept_metadata: dict[str, Any] = {
        key: metadata[key]
        for key in (
            "name",
            "namespace",
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "deletionTimestamp",
        )
        if key in metadata
    }
    labels = metadata.get("labels") or {}
    kept_metadata["labels"] = {
        k: labels[k] for k in (LABEL_SANDBOX, LABEL_POOL, LABEL_UNVERIFIED) if k in labels
    }
    kept_metadata["ownerReferences"] = [
        {key: ref[key] for key in ("apiVersion", "kind", "name", "uid", "controller") if key in ref}
        for ref in metadata.get("ownerReferences") or []
        if ref.get("controller") is True
    ]
    kept_annotations = {
        k: annotations[k]
        for k in (ANNOTATION_PROFILE_DIGEST, ANNOTATION_BOUNDARY)
        if k in annotations
    }
    if kept_annotations:
        kept_metadata["annotations"] = kept_annotations
    # nodeSelector: the RuntimeClass's, which admission copied in; a pod no node takes
    # says which label it waits for (builders/conditions.py).
    kept_spec: dict[str, Any] = {
        key: spec[key]
        for key in ("nodeName", "activeDeadlineSeconds", "nodeSelector")
        if key in spec
    }
    kept_spec["containers"] = [
        {"name": c.get("name"), "resources": {"limits": (c.get("resources") or {}).get("limits")}}
        for c in spec.get("containers") or []
        if c.get("name") == CONTAINER_NAME
    ]
    return {"metadata": kept_metadata, "spec": kept_spec, "status": dict(pod.get("status") or {})}


class _Known:
    """Names seen by a watch, plus misses that one read confirmed absent (for a while)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._present: dict[str, Any] = {}
        self._absent: dict[str, float] = {}
        self._clock = clock

    def put(self, name: str, value: Any) -> None:
        self._present[name] = value
        self._absent.pop(name, None)

    def remove(self, name: str) -> None:
        self._present.pop(name, None)
        self._absent[name] = self._clock()

    def lookup(self, name: str) -> tuple[bool, Any]:
        """(known, value): value is None for a name known to be absent."""
        if name in self._present:
            return True, self._present[name]
        absent_since = self._absent.get(name)
        if absent_since is not None and self._clock() - absent_since < NEGATIVE_TTL_SECONDS:
            return True, None
        return False, None

    def names(self) -> set[str]:
        return set(self._present)


class Watched:
    """Thread-safe; written by watch handlers and by fall-back reads, read by the reconcile."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._namespaces = _Known(clock)
        self._runtime_classes = _Known(clock)
        self._policies = _Known(clock)
        self._clock = clock
        self._pods: dict[tuple[str, str], dict[str, Any]] = {}
        self._gone: dict[str, float] = {}  # uid -> when its deletion was seen, oldest first
        # Uids of sandbox pods whose container the kubelet has reported started.
        self._started: set[str] = set()

    # Namespaces ------------------------------------------------------------

    def namespace_seen(self, name: str, labels: Mapping[str, str] | None) -> bool:
        """Record a namespace's labels; True when they changed."""
        with self._lock:
            known, before = self._namespaces.lookup(name)
            after = dict(labels or {})
            self._namespaces.put(name, after)
            return not known or before != after

    def namespace_gone(self, name: str) -> None:
        with self._lock:
            self._namespaces.remove(name)
            self._policies.remove(name)

    def namespace_labels(self, name: str) -> tuple[bool, dict[str, str] | None]:
        with self._lock:
            known, labels = self._namespaces.lookup(name)
            return known, dict(labels) if labels is not None else None

    # RuntimeClasses --------------------------------------------------------

    def runtime_class_seen(self, name: str, handler: str = "") -> bool:
        """True when the name was not known to exist before. `handler` is its handler (the
        runtime a node must have for it), kept for `runtime_class_handler`."""
        with self._lock:
            known, before = self._runtime_classes.lookup(name)
            self._runtime_classes.put(name, handler or True)
            return not (known and before)

    def runtime_class_gone(self, name: str) -> None:
        with self._lock:
            self._runtime_classes.remove(name)

    def runtime_class_handler(self, name: str) -> str | None:
        """The handler of a RuntimeClass the watch has shown (None: not known)."""
        with self._lock:
            known, value = self._runtime_classes.lookup(name)
            return value if known and isinstance(value, str) else None

    def runtime_class_exists(self, name: str) -> bool | None:
        """True / False when known, None when it has to be read."""
        with self._lock:
            known, value = self._runtime_classes.lookup(name)
            return bool(value) if known else None

    # NetworkPolicies -------------------------------------------------------

    def policy_seen(self, namespace: str) -> None:
        with self._lock:
            self._policies.put(namespace, True)

    def policy_gone(self, namespace: str) -> None:
        with self._lock:
            self._policies.remove(namespace)

    def has_policy(self, namespace: str) -> bool:
        with self._lock:
            known, value = self._policies.lookup(namespace)
            return known and bool(value)

    # Sandbox pods ------------------------------------------------------------

    def pod_seen(self, pod: Mapping[str, Any]) -> None:
        """Keep this copy of a pod, from its watch or from the answer to one of our writes,
        unless the cache holds a later one: the two arrive in either order."""
        slim = slim_pod(pod)
        metadata = slim["metadata"]
        key = (metadata.get("namespace", ""), metadata.get("name", ""))
        with self._lock:
            if metadata.get("uid") in self._gone:
                return
            current = self._pods.get(key)
            if current is not None and _outdated(slim, current):
                return
            self._pods[key] = slim

    def pod_gone(self, namespace: str, name: str, uid: str | None = None) -> None:
        with self._lock:
            current = self._pods.get((namespace, name))
            if current is not None and (uid is None or current["metadata"].get("uid") == uid):
                del self._pods[(namespace, name)]
                self._started.discard(current["metadata"].get("uid"))
                uid = uid or current["metadata"].get("uid")
            if uid:
                self._remember_gone(uid)

    def _remember_gone(self, uid: str) -> None:
        now = self._clock()
        while self._gone:
            oldest, when = next(iter(self._gone.items()))
            if now - when < GONE_MEMORY_SECONDS:
                break
            del self._gone[oldest]
        self._gone[uid] = now

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            return self._pods.get((namespace, name))

    def pod_owned_by(self, namespace: str, uid: str) -> list[dict[str, Any]]:
        """The pods in a namespace whose controller is the object with this uid."""
        with self._lock:
            return [
                pod
                for (pod_namespace, _), pod in self._pods.items()
                if pod_namespace == namespace and _controller_uid(pod) == uid
            ]

    def pool_pods(self) -> list[dict[str, Any]]:
        """Every pod still in a warm pool (not yet handed out), in every namespace."""
        with self._lock:
            return [
                pod
                for pod in self._pods.values()
                if pod["metadata"].get("labels", {}).get(LABEL_POOL) and not _controller_uid(pod)
            ]

    def container_started(self, uid: str) -> None:
        with self._lock:
            self._started.add(uid)

    def has_started(self, uid: str) -> bool:
        """Whether the kubelet reported the pod's container started (before it says Ready)."""
        with self._lock:
            return uid in self._started


def _outdated(copy: Mapping[str, Any], current: Mapping[str, Any]) -> bool:
    """The copy is of the same pod as the cached one and was written before it (a watch
    event our write's answer overtook, or the reverse)."""
    before, now = copy["metadata"], current["metadata"]
    return before.get("uid") == now.get("uid") and is_older(
        before.get("resourceVersion"), now.get("resourceVersion")
    )


def _controller_uid(pod: Mapping[str, Any]) -> str | None:
    for reference in pod["metadata"].get("ownerReferences") or []:
        if reference.get("controller") is True:
            return str(reference.get("uid"))
    return None
