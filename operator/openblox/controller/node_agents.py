"""Takes the ready label off nodes whose agent stopped renewing its Lease.

The agent takes the label off itself when a check fails or when it is stopped; this loop
covers the agent that cannot: killed, wedged, its node cut off from the API server. Only
the Lease holder runs it, every INTERVAL_SECONDS; an admission policy lets the operator
take this label off a Node and change nothing else (manifests/node-agent-policy.yaml).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from openblox.controller import metrics
from openblox.controller.election import NotLeader
from openblox.controller.events import EventRecorder
from openblox.controller.kube import Kube, path
from openblox.models.node_agents import silent_agents
from openblox.names import LABEL_GVISOR_READY, NODE_AGENT_NAMESPACE, Reason
from openblox.transport import NotFound

log = logging.getLogger(__name__)

INTERVAL_SECONDS = 10.0


@dataclass(frozen=True)
class NodeAgentWatch:
    kube: Kube
    events: EventRecorder
    held: Callable[[], bool]
    interval: float = INTERVAL_SECONDS
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(self.interval):
            if not self.held():
                continue
            try:
                self.run_once()
            except NotLeader:
                log.info("lost the Lease during a node agent pass; standing by")
            except Exception:
                log.exception("node agent pass failed; trying again next interval")

    def run_once(self) -> list[str]:
        """The nodes whose label it took off."""
        nodes = self.kube.get(path(plural="nodes"), labelSelector=f"{LABEL_GVISOR_READY}=true")
        items = nodes.get("items") or []
        if not items:
            return []
        leases = self.kube.get(
            path(group="coordination.k8s.io", plural="leases", namespace=NODE_AGENT_NAMESPACE)
        )
        taken = []
        for silent in silent_agents(items, leases.get("items") or [], self.clock()):
            try:
                self.kube.patch(
                    path(plural="nodes", name=silent.node),
                    {"metadata": {"labels": {LABEL_GVISOR_READY: None}}},
                )
            except NotFound:
                continue  # the node is gone, and its label with it
            except NotLeader:
                raise
            except Exception:
                # One node that cannot be written must not keep the others labelled.
                log.exception("could not take %s off node %s", LABEL_GVISOR_READY, silent.node)
                continue
            taken.append(silent.node)
            metrics.NODE_AGENTS_SILENT.inc()
            message = (
                f"took {LABEL_GVISOR_READY} off node {silent.node}: {silent.why}; no new sandbox "
                "pod goes there until the agent runs again (running ones keep running)"
            )
            log.warning("%s", message)
            # A Node's Events carry its name as their uid, as the kubelet's do: that is
            # what `kubectl describe node` looks for.
            self.events.record(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {"name": silent.node, "uid": silent.node},
                },
                Reason.NODE_AGENT_SILENT,
                message,
            )
        return taken
