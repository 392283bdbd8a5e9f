"""The operator's view of every Sandbox, kept current by the watch, read by the loops.

Only the parsed, typed Sandbox is kept, never the watch's body (managedFields, labels and
annotations such as kubectl's last-applied-configuration are most of a body's size, a
tenant controls them, and nothing here reads them).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from openblox.models import Sandbox, SandboxError, parse_sandbox
from openblox.models.resource_version import is_older
from openblox.names import ANNOTATION_LAST_ACTIVITY

# The longest activity stamp worth keeping: RFC 3339 with nanoseconds and an offset is 35
# characters. Anything longer cannot parse, so it counts as no activity either way.
_LONGEST_STAMP = 64


def slim_sandbox(sandbox: Sandbox) -> Sandbox:
    """The Sandbox as the loops read it: no labels and no annotation but the activity
    stamp. A tenant writes both freely, and labels and annotations have no total size
    limit short of etcd's object size; a cache that kept them would let a few hundred
    padded Sandboxes carry the operator past its memory limit."""
    stamp = sandbox.annotations.get(ANNOTATION_LAST_ACTIVITY)
    kept = {ANNOTATION_LAST_ACTIVITY: stamp} if stamp and len(stamp) <= _LONGEST_STAMP else {}
    if not sandbox.labels and dict(sandbox.annotations) == kept:
        return sandbox
    return replace(sandbox, labels=MappingProxyType({}), annotations=MappingProxyType(kept))


def _outdated(copy: Sandbox, current: Sandbox) -> bool:
    """The copy is of the same Sandbox as the cached one, and was written before it: the
    watch can deliver an event after our own write's answer, and our write's answer can
    come back after the watch delivered a later change (a caller's edit)."""
    return copy.uid == current.uid and is_older(copy.resource_version, current.resource_version)


class SandboxCache:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[tuple[str, str], Sandbox] = {}

    def upsert(self, body: Mapping[str, Any] | Sandbox) -> Sandbox | None:
        if isinstance(body, Sandbox):
            sandbox = body
        else:
            try:
                sandbox = parse_sandbox(body)
            except SandboxError:
                return None
        sandbox = slim_sandbox(sandbox)
        key = (sandbox.namespace, sandbox.name)
        with self._lock:
            current = self._items.get(key)
            if current is not None and _outdated(sandbox, current):
                # An event of an earlier write, delivered after our own write's answer.
                return current
            self._items[key] = sandbox
        return sandbox

    def refresh(self, sandbox: Sandbox) -> None:
        """Keep a newer copy (say, our own status patch's answer) of a Sandbox still cached."""
        sandbox = slim_sandbox(sandbox)
        key = (sandbox.namespace, sandbox.name)
        with self._lock:
            current = self._items.get(key)
            if (
                current is not None
                and current.uid == sandbox.uid
                and not _outdated(sandbox, current)
            ):
                self._items[key] = sandbox

    def remove(self, namespace: str, name: str) -> None:
        with self._lock:
            self._items.pop((namespace, name), None)

    def get(self, namespace: str, name: str) -> Sandbox | None:
        with self._lock:
            return self._items.get((namespace, name))

    def sandboxes(self) -> list[Sandbox]:
        with self._lock:
            return list(self._items.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)
