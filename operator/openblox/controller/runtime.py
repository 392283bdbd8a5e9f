"""The operator's parts, wired together once at start-up."""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from openblox.controller.events import EventRecorder
from openblox.controller.kube import Kube
from openblox.controller.lease import Lease
from openblox.controller.peering import keep_peering
from openblox.controller.pool_claim import PoolClaimer
from openblox.controller.pool_keeper import PoolKeeper
from openblox.controller.pool_store import PoolStore
from openblox.controller.profile_store import ProfileStore
from openblox.controller.profile_watch import ProfileWatcher
from openblox.controller.reaper import Reaper
from openblox.controller.reconcile import Reconciler, Settings
from openblox.controller.requeue import Requeue
from openblox.controller.sandbox_cache import SandboxCache
from openblox.controller.started_watch import StartedWatcher
from openblox.controller.watched import Watched
from openblox.names import KIND

log = logging.getLogger(__name__)

# Sandboxes are not reconciled before the profiles are known: an early reconcile would
# report ProfileNotFound for a profile that exists.
PROFILES_LOAD_TIMEOUT_SECONDS = 30.0


@dataclass
class Runtime:
    kube: Kube
    profiles: ProfileStore
    cache: SandboxCache
    reconciler: Reconciler
    reaper: Reaper
    profile_watcher: ProfileWatcher
    watched: Watched
    pools: PoolStore
    pool_keeper: PoolKeeper
    started_watcher: StartedWatcher
    stop: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)

    @classmethod
    def build(cls) -> Runtime:
        kube = Kube.connect()
        identity = os.environ.get("POD_NAME") or socket.gethostname()
        profiles = ProfileStore()
        cache = SandboxCache()
        events = EventRecorder(kube, identity)
        watched = Watched()
        reconciler = Reconciler(
            kube,
            profiles,
            events,
            Settings.from_environment(),
            watched=watched,
            cache=cache,
            requeue=Requeue(),
        )
        lease = Lease(kube, "openblox-reaper", identity)
        reaper = Reaper(kube, cache, profiles, reconciler, events=events, lease=lease)
        pools = PoolStore(kube, events)
        # Refill runs in one replica: the one holding the reaper's Lease.
        keeper = PoolKeeper(kube, watched, pools, profiles, reconciler, held=lease.is_held)
        pools.on_change = keeper.nudge
        reconciler.pods.claimer = PoolClaimer(kube, watched, pools, reconciler.boundary_of)

        def profiles_changed() -> None:
            reaper.request_resync()
            keeper.nudge()

        watcher = ProfileWatcher(kube, profiles, events, on_change=profiles_changed)

        def probe_started(namespace: str, pod: str) -> None:
            owner = _controller_name(watched.pod(namespace, pod))
            sandbox = cache.get(namespace, owner) if owner else None
            if sandbox is None:
                return
            try:
                reconciler.reconcile(sandbox, "started")
            except Exception:
                # Counted and requeued by the reconcile; said here, not lost in a future.
                log.exception("reconcile of %s/%s failed", namespace, sandbox.name)

        started = StartedWatcher(kube, watched, on_started=probe_started)
        return cls(
            kube, profiles, cache, reconciler, reaper, watcher, watched, pools, keeper, started
        )

    def start(self) -> None:
        loops = (
            ("profiles", self.profile_watcher.run),
            ("started", self.started_watcher.run),
            ("reaper", self.reaper.run),
            ("pools", self.pools.run),
            ("pool-keeper", self.pool_keeper.run),
            ("peering", partial(keep_peering, self.kube)),
        )
        for name, target in loops:
            thread = threading.Thread(target=target, args=(self.stop,), name=name, daemon=True)
            thread.start()
            self.threads.append(thread)
        self.profiles.wait_loaded(PROFILES_LOAD_TIMEOUT_SECONDS)

    def shutdown(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=5)


def _controller_name(pod: Mapping[str, Any] | None) -> str | None:
    """The name of the Sandbox that controls a slim pod, if any."""
    for reference in (pod or {}).get("metadata", {}).get("ownerReferences") or []:
        if reference.get("kind") == KIND and reference.get("controller") is True:
            return str(reference.get("name"))
    return None
