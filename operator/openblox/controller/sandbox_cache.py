"""The operator's view of every Sandbox, kept current by the watch, read by the loops.

Only the parsed, typed Sandbox is kept, never the watch's body (managedFields, and
annotations such as kubectl's last-applied-configuration, are most of a body's size and
nothing here reads them).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from openblox.models import Sandbox, SandboxError, parse_sandbox
from openblox.names import GROUP

KEPT_ANNOTATION_PREFIX = f"{GROUP}/"


def slim_sandbox(sandbox: Sandbox) -> Sandbox:
    """The Sandbox without annotations the operator never reads."""
    if all(key.startswith(KEPT_ANNOTATION_PREFIX) for key in sandbox.annotations):
        return sandbox
    kept = {k: v for k, v in sandbox.annotations.items() if k.startswith(KEPT_ANNOTATION_PREFIX)}
    return replace(sandbox, annotations=kept)


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
        with self._lock:
            self._items[(sandbox.namespace, sandbox.name)] = sandbox
        return sandbox

    def refresh(self, sandbox: Sandbox) -> None:
        """Keep a newer copy (say, our own status patch's answer) of a Sandbox still cached."""
        sandbox = slim_sandbox(sandbox)
        key = (sandbox.namespace, sandbox.name)
        with self._lock:
            current = self._items.get(key)
            if current is not None and current.uid == sandbox.uid:
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
