"""Many execs from one event loop: `openblox.AsyncClient` against the sync client on threads.

`async-exec`: 200 concurrent `sandbox.exec(["true"])` with `openblox.AsyncClient` from one
event loop, against the sync `openblox.Client` on 200 threads (the baseline, same run),
each call the same command through the same in-sandbox supervisor. The execs are spread
round robin over enough code-exec Sandboxes (default 25 execs each, so 8) that none of
them holds more processes than its cap or queues an absurd number of calls behind its
CPU limit: what is measured is the client, not one sandbox's queue. The room for them is
checked first with tests/cluster/capacity.py; short of room the section fails and says
what is short, it never measures a smaller figure in silence. Rounds alternate async and
sync (2 pairs), so drift in the node's load falls on both alike. Per call p50/p95, wall
time per round, every failed exec counted with its reason, and the peak thread count of
the process during an async round, which shows that no call took a thread.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import math
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

from bench import env
from bench.cluster_side import delete_namespace, make_namespace
from bench.results import Section
from openblox.client import AsyncClient, Client, ExecResult

TITLES = {"async-exec": "Async client: 200 concurrent execs from one event loop vs 200 threads"}
PRODUCES = ["async-exec"]
PROFILE = "code-exec"
# Processes one `exec(["true"])` holds in the sandbox at once: the supervisor and the
# command, with one more for the supervisor's fork and one of margin. The per-sandbox
# share must stay under the profile's cap with this count, or the figure measures
# refused forks instead of the client.
PROCESSES_PER_EXEC = 4
# A call still unanswered after this long is counted as failed (the profile kills a
# command after 60 s, so this is a hung exec, not a slow one), and the round ends.
CALL_BOUND_S = 180.0


def room_for(wanted: int) -> tuple[int, str]:
    """How many code-exec Sandboxes fit now (at most `wanted`), and the node's room."""
    env.use_test_helpers()
    from tests.cluster.capacity import node_rooms, sandbox_node_selector, sandbox_requests
    from tests.cluster.kubectl import Kube as TestKube

    kube = TestKube(env.KUBECONFIG)
    each = sandbox_requests(kube, PROFILE)
    rooms = node_rooms(kube, sandbox_node_selector(kube, PROFILE))
    fitting = sum(room.how_many(each) for room in rooms)
    described = " | ".join(room.describe()[:300] for room in rooms) or "no schedulable node"
    return min(wanted, fitting), f"each {PROFILE} Sandbox requests {each}; {described}"


@contextlib.contextmanager
def sandboxes(ctx: Any, count: int, prefix: str) -> Iterator[tuple[str, list[str]]]:
    """`count` ready code-exec Sandboxes in a namespace of their own, deleted afterwards."""
    ns = make_namespace(ctx.kube, f"obx-bench-{prefix}-{ctx.run_id}", sandboxes=True)
    ctx.cleanup(delete_namespace, ctx.kube, ns)
    client = Client(ns, kubeconfig=env.KUBECONFIG)
    names = [f"{prefix}-{i}" for i in range(count)]
    with concurrent.futures.ThreadPoolExecutor(count) as pool:
        boxes = list(pool.map(lambda n: client.create(PROFILE, n, timeout=300), names))
    try:
        yield ns, [box.name for box in boxes]
    finally:
        for box in boxes:
            with contextlib.suppress(Exception):
                box.delete()


def _reason(result: ExecResult) -> str | None:
    """Why an exec did not succeed, or None when it did."""
    if result.ok:
        return None
    stderr = result.stderr.decode(errors="replace").strip()
    return f"exit {result.exit_code}{' (timed out)' if result.timed_out else ''}: {stderr[:160]}"


def _failure(error: BaseException) -> str:
    text = str(error).strip()[:200]
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


async def _async_round(client: AsyncClient, names: Sequence[str], n: int) -> dict[str, Any]:
    boxes = [await client.get(name) for name in names]
    threads_before = threading.active_count()
    threads_peak = threads_before
    done = asyncio.Event()

    async def watch_threads() -> None:
        nonlocal threads_peak
        while not done.is_set():
            threads_peak = max(threads_peak, threading.active_count())
            await asyncio.sleep(0.01)

    async def one(i: int) -> tuple[float, str | None]:
        started = time.perf_counter()
        try:
            call = boxes[i % len(boxes)].exec(["true"])
            reason = _reason(await asyncio.wait_for(call, CALL_BOUND_S))
        except Exception as error:
            reason = _failure(error)
        return (time.perf_counter() - started) * 1000, reason

    watcher = asyncio.create_task(watch_threads())
    started = time.perf_counter()
    results = await asyncio.gather(*(one(i) for i in range(n)))
    wall = (time.perf_counter() - started) * 1000
    done.set()
    await watcher
    return {
        "latencies": [ms for ms, _ in results],
        "errors": [reason for _, reason in results if reason],
        "wall_ms": wall,
        "threads_before": threads_before,
        "threads_peak": threads_peak,
    }


def _sync_round(client: Client, names: Sequence[str], n: int) -> dict[str, Any]:
    boxes = [client.get(name) for name in names]
    threads_before = threading.active_count()
    barrier = threading.Barrier(n + 1)
    latencies: list[float] = [0.0] * n
    reasons: list[str | None] = [None] * n

    def one(i: int) -> None:
        barrier.wait()
        started = time.perf_counter()
        try:
            reasons[i] = _reason(boxes[i % len(boxes)].exec(["true"]))
        except Exception as error:
            reasons[i] = _failure(error)
        latencies[i] = (time.perf_counter() - started) * 1000

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(n)]
    for thread in threads:
        thread.start()
    threads_peak = threading.active_count()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join(max(0.0, started + CALL_BOUND_S - time.perf_counter()))
    wall = (time.perf_counter() - started) * 1000
    stuck = [i for i, thread in enumerate(threads) if thread.is_alive()]
    for i in stuck:  # a call with no answer counts at the bound, not at 0
        latencies[i] = wall
    errors = [reason for reason in reasons if reason]
    errors += [f"no answer after {CALL_BOUND_S:.0f} s"] * len(stuck)
    return {
        "latencies": latencies,
        "errors": errors,
        "wall_ms": wall,
        "threads_before": threads_before,
        "threads_peak": threads_peak,
    }


def _measure(ctx: Any, section: Section, ns: str, names: list[str], n: int) -> None:
    rounds = ctx.n(2, 1)
    sync_client = Client(ns, kubeconfig=env.KUBECONFIG)
    async_client = AsyncClient(ns, kubeconfig=env.KUBECONFIG)
    loop = asyncio.new_event_loop()
    samples: dict[str, list[dict[str, Any]]] = {"async": [], "sync": []}
    try:
        # Warm both paths on every sandbox (connections, TLS, the supervisor's pages),
        # so the first measured round does not pay for them.
        _sync_round(sync_client, names, len(names))
        loop.run_until_complete(_async_round(async_client, names, len(names)))
        # Async, then the sync baseline, per pair; the figures are written after each
        # pair, so an interrupted run keeps what it measured.
        for pair in range(rounds):
            samples["async"].append(loop.run_until_complete(_async_round(async_client, names, n)))
            ctx.log(f"async-exec: async round {pair + 1} done")
            samples["sync"].append(_sync_round(sync_client, names, n))
            ctx.log(f"async-exec: sync round {pair + 1} done")
            _write(section, samples, n, len(names))
        loop.run_until_complete(async_client.aclose())
    finally:
        loop.close()


def _write(section: Section, samples: dict[str, list[dict[str, Any]]], n: int, boxes: int) -> None:
    rows = []
    walls: dict[str, float] = {}
    for kind in ("sync", "async"):
        runs = samples[kind]
        label = (
            "AsyncClient, one event loop"
            if kind == "async"
            else f"Client on {n} threads (baseline)"
        )
        latency = section.figure(
            f"async_exec.latency.{kind}",
            f"{n} concurrent exec `true` over {boxes} sandboxes, per call: {label}",
            "ms",
            [ms for r in runs for ms in r["latencies"]],
            baseline="async_exec.latency.sync" if kind == "async" else None,
        )
        wall = section.figure(
            f"async_exec.wall.{kind}",
            f"{n} concurrent exec `true` over {boxes} sandboxes, wall time of a round: {label}",
            "ms",
            [r["wall_ms"] for r in runs],
            baseline="async_exec.wall.sync" if kind == "async" else None,
        )
        walls[kind] = wall.center or 0.0
        errors = [reason for r in runs for reason in r["errors"]]
        rows.append(
            [
                label,
                f"{latency.center:.0f}",
                f"{latency.stats['p95']:.0f}",
                " / ".join(f"{r['wall_ms']:,.0f}" for r in runs),
                f"{n * 1000 / wall.center:.1f}" if wall.center else "",
                " / ".join(f"{r['threads_before']} → {r['threads_peak']}" for r in runs),
                f"{len(errors)} of {n * len(runs)}",
            ]
        )
    section.tables = []
    section.table(
        f"{n} concurrent `sandbox.exec(['true'])`, {n // boxes} per sandbox on {boxes} "
        f"{PROFILE} Sandboxes, {len(samples['sync'])} interleaved async/sync pair(s)",
        [
            "client",
            "p50 per call ms",
            "p95 per call ms",
            "wall ms per round",
            "execs/s (p50 wall)",
            "threads before → peak, per round",
            "failed",
        ],
        rows,
    )
    section.notes = [note for note in section.notes if not note.startswith("failed execs")]
    for kind in ("sync", "async"):
        counted = collections.Counter(reason for r in samples[kind] for reason in r["errors"])
        if counted:
            reasons = "; ".join(f"{count}x {reason}" for reason, count in counted.most_common(8))
            section.notes.append(f"failed execs ({kind}): {reasons}"[:1500])
    section.notes = [note for note in section.notes if not note.startswith("wall time async")]
    if walls.get("sync"):
        section.notes.append(
            f"wall time async / sync (p50 of rounds): {walls['async'] / walls['sync']:.2f}x"
        )


def run(ctx: Any, section: Section) -> None:
    n = ctx.n(200, 10)
    per_sandbox = max(1, int(getattr(ctx.args, "async_per_sandbox", 25)))
    wanted = math.ceil(n / per_sandbox)
    fitting, room = room_for(wanted)
    if fitting < wanted:
        raise RuntimeError(
            f"async-exec needs {wanted} {PROFILE} Sandboxes ({n} execs, {per_sandbox} each) "
            f"and the node has room for {fitting}: {room}"
        )
    with sandboxes(ctx, wanted, "async-exec") as (ns, names):
        cap = Client(ns, kubeconfig=env.KUBECONFIG).get(names[0]).exec_limits.processes
        share = math.ceil(n / len(names))
        if share * PROCESSES_PER_EXEC > cap:
            raise RuntimeError(
                f"{share} execs per sandbox hold about {share * PROCESSES_PER_EXEC} processes, "
                f"over the {PROFILE} cap of {cap}; lower --async-per-sandbox"
            )
        section.notes = [
            f"{n} execs over {len(names)} {PROFILE} Sandboxes, {share} per sandbox "
            f"(about {share * PROCESSES_PER_EXEC} of its {cap} processes); room checked "
            f"first: {room}"[:1500],
            f"{PROFILE} Sandboxes under gVisor; client and cluster on the same machine.",
        ]
        _measure(ctx, section, ns, names, n)
