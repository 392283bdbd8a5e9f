"""Which nodes' agents have gone quiet, so that their nodes stop taking sandbox pods.

The node agent (node-agent/) labels its node ready and renews a Lease named after it. An
agent that is gone or wedged cannot take its own label off, so the operator does, once
the Lease has not been renewed within its duration (ADR 0020). Pure: the Node and Lease
bodies and the time in, the nodes to take the label off out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from openblox.names import LABEL_GVISOR_READY, NODE_AGENT_NAMESPACE
from openblox.timestamps import parse_optional_timestamp

# A Lease that states no duration is held to this one (the agent writes four rounds).
DEFAULT_LEASE_SECONDS = 40


@dataclass(frozen=True, slots=True)
class SilentAgent:
    node: str
    why: str


def silent_agents(
    nodes: Iterable[Mapping[str, Any]], leases: Iterable[Mapping[str, Any]], now: datetime
) -> list[SilentAgent]:
    """The nodes labelled ready whose agent's Lease is missing, unreadable or lapsed."""
    renewed: dict[str, tuple[datetime | None, int]] = {}
    for lease in leases:
        spec = lease.get("spec") or {}
        seconds = spec.get("leaseDurationSeconds")
        duration = DEFAULT_LEASE_SECONDS
        if isinstance(seconds, int) and not isinstance(seconds, bool) and seconds > 0:
            duration = seconds
        renewed[str((lease.get("metadata") or {}).get("name"))] = (
            parse_optional_timestamp(spec.get("renewTime")),
            duration,
        )
    silent = []
    for node in nodes:
        metadata = node.get("metadata") or {}
        if (metadata.get("labels") or {}).get(LABEL_GVISOR_READY) != "true":
            continue
        name = str(metadata.get("name"))
        lease_name = f"{NODE_AGENT_NAMESPACE}/{name}"
        if name not in renewed:
            silent.append(SilentAgent(name, f"its node agent holds no Lease {lease_name}"))
            continue
        renew_time, duration = renewed[name]
        if renew_time is None:
            silent.append(
                SilentAgent(name, f"its node agent's Lease {lease_name} has no renewTime")
            )
            continue
        age = (now - renew_time).total_seconds()
        if age > duration:
            silent.append(
                SilentAgent(
                    name,
                    f"its node agent last renewed its Lease {lease_name} {age:.0f} s ago "
                    f"(it lapses after {duration} s)",
                )
            )
    return silent
