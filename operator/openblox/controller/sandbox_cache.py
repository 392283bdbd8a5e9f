"""The operator's view of every Sandbox, kept current by the watch, read by the loops."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from openblox.models import Sandbox, SandboxError, parse_sandbox


class SandboxCache:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[tuple[str, str], tuple[Mapping[str, Any], Sandbox]] = {}

    def upsert(self, body: Mapping[str, Any]) -> Sandbox | None:
        try:
            sandbox = parse_sandbox(body)
        except SandboxError:
            return None
        with self._lock:
            self._items[(sandbox.namespace, sandbox.name)] = (dict(body), sandbox)
        return sandbox

    def remove(self, namespace: str, name: str) -> None:
        with self._lock:
            self._items.pop((namespace, name), None)

    def body(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        with self._lock:
            item = self._items.get((namespace, name))
        return item[0] if item else None

    def sandboxes(self) -> list[Sandbox]:
        with self._lock:
            return [sandbox for _, sandbox in self._items.values()]

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)
