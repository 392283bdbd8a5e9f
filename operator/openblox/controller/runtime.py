"""The operator's parts, wired together once at start-up."""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from openblox.controller import metrics
from openblox.controller.deadlines import Deadlines
from openblox.controller.election import Election
from openblox.controller.events import EventRecorder
from openblox.controller.kube import Kube
from openblox.controller.namespaces import Namespaces
from openblox.controller.node_agents import NodeAgentWatch
from openblox.controller.pod_boundaries import PodBoundaries
from openblox.controller.pool_claim import PoolClaimer
from openblox.controller.pool_keeper import PoolKeeper
from openblox.controller.pool_store import PoolStore
from openblox.controller.profile_store import ProfileStore
from openblox.controller.profile_watch import ProfileWatcher
from openblox.controller.reaper import Reaper
from openblox.controller.reconcile import Reconciler
from openblox.controller.requeue import Requeue, Resyncs
from openblox.controller.runtime_checks import RuntimeChecks, network_policy_enforced
from openblox.controller.sandbox_cache import SandboxCache
from openblox.controller.sandbox_pods import SandboxPods
from openblox.controller.started_watch import StartedWatcher
from openblox.controller.unprepared_nodes import UnpreparedNodes
from openblox.controller.watched import Watched
from openblox.controller.work_queue import Key, WorkQueue, work
from openblox.models import Sandbox
from openblox.names import KIND, LEADER_LEASE

log = logging.getLogger(__name__)

# Sandboxes are not reconciled before the profiles are known: an early reconcile would
# report ProfileNotFound for a profile that exists.
PROFILES_LOAD_TIMEOUT_SECONDS = 30.0
# Reconciles at once: each waits on the API server most of its time.
RECONCILE_WORKERS = 16


@dataclass
class Runtime:
    """Every part, built once by `build` and handed what it needs through its constructor;
    nothing is set on a part after it is made. The handlers reach the parts from here."""

    kube: Kube
    profiles: ProfileStore
    cache: SandboxCache
    watched: Watched
    boundaries: PodBoundaries
    resyncs: Resyncs
    reconciler: Reconciler
    queue: WorkQueue
    reconcile_queued: Callable[[Key, str], None]
    reaper: Reaper
    profile_watcher: ProfileWatcher
    pools: PoolStore
    pool_keeper: PoolKeeper
    started_watcher: StartedWatcher
    node_agents: NodeAgentWatch
    election: Election
    stop: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)

    @classmethod
    def build(cls) -> Runtime:
        unfenced = Kube.connect()
        pod = os.environ.get("POD_NAME") or socket.gethostname()
        # Unique per process: a container the kubelet restarts in the same pod is a new
        # candidate, not the holder it replaced (which may have died mid-write).
        election = Election(unfenced, LEADER_LEASE, f"{pod}_{secrets.token_hex(4)}")
        # Everything but the election writes through this client: nothing leaves a
        # replica that does not hold the Lease.
        kube = unfenced.guarded(election.writing)
        profiles = ProfileStore()
        cache = SandboxCache()
        events = EventRecorder(kube, pod)
        watched = Watched()
        # Shared by the reconcile and the loops: each is one part, asked by all.
        requeue, deadlines, resyncs = Requeue(), Deadlines(), Resyncs()
        namespaces = Namespaces(kube, watched)
        runtimes = RuntimeChecks(kube, watched, network_policy_enforced=network_policy_enforced())
        boundaries = PodBoundaries(kube, watched, requeue)
        unprepared = UnpreparedNodes()
        # What wakes the pool keeper: a change of the pools, or a `nudge`.
        refill = threading.Event()
        pools = PoolStore(kube, events, on_change=refill.set)
        # Refill runs in one replica: the one holding the operator's Lease. Hand-outs
        # happen inside the reconcile, which only the holder runs.
        keeper = PoolKeeper(
            kube,
            watched,
            pools,
            profiles,
            namespaces=namespaces,
            runtimes=runtimes,
            boundaries=boundaries,
            unprepared=unprepared,
            held=lambda: election.leading,
            wake=refill,
        )
        claimer = PoolClaimer(kube, watched, pools, boundaries.of, on_hand_out=keeper.handed_out)

        def sole_hand_out(sandbox: Sandbox) -> bool:
            return election.sole_writer_for(sandbox.creation_timestamp)

        pods = SandboxPods(kube, watched, claimer=claimer, sole_hand_out=sole_hand_out)
        reconciler = Reconciler(
            kube,
            profiles,
            events,
            namespaces=namespaces,
            runtimes=runtimes,
            pods=pods,
            boundaries=boundaries,
            unprepared=unprepared,
            cache=cache,
            requeue=requeue,
            deadlines=deadlines,
        )

        def profiles_changed() -> None:
            resyncs.request()
            keeper.nudge()

        watcher = ProfileWatcher(
            kube,
            profiles,
            events,
            on_change=profiles_changed,
            leading=lambda: election.leading,
        )

        def take_over() -> None:
            # What a standby left unwritten: the admission parameters and the Events
            # about refused profiles and pools; then a refill pass at once. A failure
            # here must not keep the reaper from reconciling every Sandbox next.
            for step in (watcher.take_over, pools.take_over):
                try:
                    step()
                except Exception:
                    log.exception("taking over: %s failed; retried at the next change", step)
            keeper.nudge()

        reaper = Reaper(
            kube,
            cache,
            profiles,
            reconcile=reconciler.reconcile,
            requeue=requeue,
            deadlines=deadlines,
            resyncs=resyncs,
            events=events,
            election=election,
            on_takeover=take_over,
        )

        queue = WorkQueue()
        metrics.RECONCILE_QUEUE.set_function(lambda: len(queue))

        def reconcile_queued(key: Key, trigger: str) -> None:
            # A reconcile writes; a standby leaves it to the holder. The cache's copy is
            # the newest: the event that queued the key may be older than the last write.
            sandbox = cache.get(*key)
            if sandbox is not None and election.leading:
                reconciler.reconcile(sandbox, trigger)

        def probe_started(namespace: str, pod: str) -> None:
            owner = _controller_name(watched.pod(namespace, pod))
            if owner and election.leading:
                queue.add((namespace, owner), "started")

        started = StartedWatcher(kube, watched, on_started=probe_started)
        return cls(
            kube=kube,
            profiles=profiles,
            cache=cache,
            watched=watched,
            boundaries=boundaries,
            resyncs=resyncs,
            reconciler=reconciler,
            queue=queue,
            reconcile_queued=reconcile_queued,
            reaper=reaper,
            profile_watcher=watcher,
            pools=pools,
            pool_keeper=keeper,
            started_watcher=started,
            node_agents=NodeAgentWatch(kube, events, held=lambda: election.leading),
            election=election,
        )

    def start(self) -> None:
        loops = (
            ("profiles", self.profile_watcher.run),
            ("started", self.started_watcher.run),
            ("reaper", self.reaper.run),
            ("pools", self.pools.run),
            ("pool-keeper", self.pool_keeper.run),
            ("node-agents", self.node_agents.run),
            ("election", self.election.run),
        )
        for name, target in loops:
            thread = threading.Thread(target=target, args=(self.stop,), name=name, daemon=True)
            thread.start()
            self.threads.append(thread)
        for number in range(RECONCILE_WORKERS):
            thread = threading.Thread(
                target=work,
                args=(self.queue, self.reconcile_queued, self.stop),
                name=f"reconcile-{number}",
                daemon=True,
            )
            thread.start()
            self.threads.append(thread)
        self.profiles.wait_loaded(PROFILES_LOAD_TIMEOUT_SECONDS)

    def shutdown(self) -> None:
        self.stop.set()
        # First, before waiting for the loops: the fence closes at once, and a standby
        # takes over at its next look (2 s), not after the Lease's 15 s (a rolling
        # update, a drained node).
        self.election.release()
        for thread in self.threads:
            thread.join(timeout=5)


def _controller_name(pod: Mapping[str, Any] | None) -> str | None:
    """The name of the Sandbox that controls a slim pod, if any."""
    for reference in (pod or {}).get("metadata", {}).get("ownerReferences") or []:
        if reference.get("kind") == KIND and reference.get("controller") is True:
            return str(reference.get("name"))
    return None
