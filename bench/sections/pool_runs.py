"""One pool scenario on one system (openblox, or agent-sandbox beside it): fill its
pool, run the claims, record their times, the API writes and the node CPU they cost,
and empty the pool again, so that the next system starts on a quiet node."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench import api_writes, claim_load, node_cpu
from bench.claims import Claim, summarize_run
from bench.cluster_side import Kube
from bench.results import Section

GROUP: dict[str, Any] = {
    "group": "pool",
    "group_title": "Warm claim vs cold create, create→Ready",
    "log": True,
}
# A quiet window before each burst: the writes others make meanwhile (background).
QUIET_SECONDS = 5.0


@dataclass
class Side:
    """What the pool section needs of one system."""

    label: str
    prefix: str
    """Figure keys start with it: `pool` for openblox, `pool.agent_sandbox` beside."""
    claim: claim_load.ClaimFunction
    delete: Callable[[str], object]
    set_pool: Callable[[int], None]
    wait_warm: Callable[[int], float]
    warm: Callable[[], int]
    settle: Callable[[list[str]], None]
    drain: Callable[[], None]
    roles: Callable[[], dict[str, list[int]]] = field(default=dict)
    """Its own processes for the CPU reading, beside the node's (its controller)."""
    check: Callable[[], str] | None = None
    """Reads one of its pods back once the pool is full: a note on how it was made."""


def record(
    section: Section, side: Side, key: str, title: str, claims: list[Claim], **extra: Any
) -> None:
    cold = sum(1 for c in claims if c.ms is not None and not c.warm)
    section.figure(
        f"{side.prefix}.{key}",
        title if side.prefix == "pool" else f"{side.label}: {title}",
        "ms",
        [c.ms for c in claims if c.ms is not None],
        baseline=f"{side.prefix}.cold",
        label=title if side.prefix == "pool" else f"{side.label}: {title}",
        notes=f"{cold} of {len(claims)} found no warm pod and went cold",
        **GROUP,
        **extra,
    )


def writes_now(kube: Kube) -> dict[str, float]:
    return api_writes.parse_writes(kube.text("/metrics"))


def background_per_s(kube: Kube, seconds: float = QUIET_SECONDS) -> float:
    before = writes_now(kube)
    time.sleep(seconds)
    return sum(api_writes.delta(before, writes_now(kube)).values()) / seconds


@dataclass
class Burst:
    claims: list[Claim]
    fill_s: float
    writes: dict[str, Any]
    cpu_ms: dict[str, float]
    """CPU ms per claim by process; empty where this is not the embedded node."""


def burst(kube: Kube, section: Section, side: Side, size: int, **extra: Any) -> Burst:
    """A burst of `size` claims at once from a full pool of `size`; the pool is emptied
    again after."""
    side.set_pool(size)
    fill = side.wait_warm(size)
    if side.check is not None:
        section.notes.append(side.check())
    background = background_per_s(kube)
    by_role = node_cpu.roles(kube)
    if by_role:
        by_role.update(side.roles())
    names = [f"burst-{i}" for i in range(size)]
    writes_before, cpu_before = writes_now(kube), node_cpu.snapshot(by_role)
    started = time.monotonic()
    claims = claim_load.burst(side.claim, names)
    seconds = time.monotonic() - started
    cpu_after, writes_after = node_cpu.snapshot(by_role), writes_now(kube)
    record(section, side, f"burst{size}", f"burst of {size} from a pool of {size}", claims, **extra)
    writes = api_writes.per_claim(
        api_writes.delta(writes_before, writes_after),
        size,
        seconds=seconds,
        background_per_s=background,
    )
    section.figure(
        f"{side.prefix}.burst{size}.api_writes",
        f"{side.label}: API writes per claim in the burst of {size} (POST/PUT/PATCH/DELETE, "
        "leases left out; first create to last Ready)",
        "writes",
        value=writes["per_claim"],
        headline=True,
        notes=f"{writes['per_claim_less_background']} less the background of "
        f"{background:.2f}/s measured in the {QUIET_SECONDS:.0f} s before",
        **writes,
    )
    cpu = node_cpu.per_claim_ms(cpu_before, cpu_after, size) if by_role else {}
    if cpu:
        section.figure(
            f"{side.prefix}.burst{size}.node_cpu",
            f"{side.label}: node CPU per claim in the burst of {size} (all processes, "
            "the pool's refill included)",
            "ms",
            value=round(sum(cpu.values()), 1),
            headline=True,
            by_process={role: round(ms, 1) for role, ms in cpu.items()},
        )
    side.settle(names)
    side.drain()
    return Burst(claims, fill, writes, cpu)


@dataclass
class Sustained:
    claims: list[Claim]
    summary: dict[str, Any]
    stopped: float | None
    writes_per_claim: float | None


def sustained(kube: Kube, side: Side, size: int, rate: float, seconds: float) -> Sustained:
    """`rate` claims a second for `seconds` from a pool of `size`, each deleted once
    Ready; the writes counted run from the first claim until every claimed pod is gone
    (creates, hand-outs, deletes and the refill: a claim's whole cost)."""
    side.set_pool(size)
    side.wait_warm(size)
    time.sleep(2)  # surplus pods from a larger size are gone
    before = side.warm()
    writes_before = writes_now(kube)
    started = time.monotonic()
    prefix = f"s{size}r{rate:g}"
    claims, stopped = claim_load.sustained(side.claim, side.delete, prefix, rate, seconds)
    after = side.warm()
    summary = summarize_run(
        claims, warm_before=before, warm_after=after, seconds=time.monotonic() - started
    )
    side.settle([f"{prefix}-{i}" for i in range(len(claims))])
    writes = sum(api_writes.delta(writes_before, writes_now(kube)).values())
    side.drain()
    return Sustained(claims, summary, stopped, round(writes / len(claims), 1) if claims else None)
