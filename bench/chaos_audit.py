"""The chaos section's auditor: every few seconds, from the admin's side, the Sandboxes
and pods of the run's namespaces, held against the invariants (`chaos_records`), and the
reaper's deadlines (`status.expiresAt`) against when each Sandbox actually went.

An audit that cannot list (the API server is down) is counted, not guessed at. Its
requests time out after AUDIT_REQUEST_SECONDS, so an audit never outlasts a fault by much.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from bench.chaos_records import Ledger
from bench.cluster_side import Kube, pods_path, sandboxes_path

AUDIT_SECONDS = 2.0
AUDIT_REQUEST_SECONDS = 5.0


def _expires_at(sandbox: dict[str, Any]) -> float | None:
    value = (sandbox.get("status") or {}).get("expiresAt")
    if not value:
        return None
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


class Auditor:
    def __init__(
        self, kubeconfig: str, namespaces: Sequence[str], reaped: str, ledger: Ledger
    ) -> None:
        self.kube = Kube(kubeconfig, request_timeout=AUDIT_REQUEST_SECONDS)
        self.namespaces = list(namespaces)
        self.reaped = reaped
        self.ledger = ledger
        self.missed = 0
        self._one_at_a_time = threading.Lock()
        self.deadlines: dict[str, float] = {}
        """Reaped Sandbox name -> its expiresAt (epoch seconds)."""
        self.late: dict[str, float] = {}
        """Reaped Sandbox name -> seconds between its expiresAt and the audit that saw it go."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def snapshot(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        sandboxes: list[dict[str, Any]] = []
        pods: list[dict[str, Any]] = []
        for namespace in self.namespaces:
            sandboxes += self.kube.get(sandboxes_path(namespace))["items"]
            pods += self.kube.get(pods_path(namespace))["items"]
        return sandboxes, pods

    def audit_once(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
        """One audit (None when the lists could not be read): the invariants and the
        reaper's deadlines, against lists read now. One at a time, from any thread."""
        with self._one_at_a_time:
            try:
                sandboxes, pods = self.snapshot()
            except Exception:  # the API server restarting: an audit missed, and counted
                self.missed += 1
                return None
            now = time.time()
            self.ledger.observe(sandboxes, pods, now)
            self._reaper(sandboxes, now)
            return sandboxes, pods

    def _reaper(self, sandboxes: list[dict[str, Any]], now: float) -> None:
        present = set()
        for sandbox in sandboxes:
            if sandbox["metadata"]["namespace"] != self.reaped:
                continue
            name = str(sandbox["metadata"]["name"])
            expires = _expires_at(sandbox)
            if expires is not None:
                self.deadlines[name] = expires
            if not sandbox["metadata"].get("deletionTimestamp"):
                present.add(name)
        for name, expires in self.deadlines.items():
            if name not in present and name not in self.late:
                self.late[name] = now - expires

    def overdue(self, now: float) -> dict[str, float]:
        """Sandboxes still there past their deadline: name -> seconds past it."""
        return {
            name: now - expires
            for name, expires in self.deadlines.items()
            if name not in self.late and now > expires
        }

    def _run(self) -> None:
        while not self._stop.wait(AUDIT_SECONDS):
            self.audit_once()
