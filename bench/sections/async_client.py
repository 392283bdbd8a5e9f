"""The async client: which asyncio stack (ADR 0011), and many execs from one event loop.

`async-stack`: each candidate stack in a fresh interpreter (`bench/async_stacks.py`):
import time and RSS after the imports, then from one event loop pods/exec of `printf 42`
one after another (p50, wrong answers) and a batch of execs of `true` at once (wall time,
peak RSS). `python -c pass` is the floor for import and RSS.

`async-exec`: 200 concurrent `sandbox.exec(["true"])` with `openblox.AsyncClient` from
one event loop, against the sync `openblox.Client` on 200 threads (the baseline), each
round the same command through the same in-sandbox supervisor. Against one sandbox, and
spread round robin over a few when the node has room (checked first with
tests/cluster/capacity.py). Per call latency (p50) and the round's wall time; the peak
thread count of the process during an async round shows that no call took a thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import importlib.metadata
import importlib.util
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench import env
from bench.kube import delete_namespace, make_namespace
from bench.results import Section
from openblox.client import AsyncClient, Client
from openblox.transport.session import Session

TITLES = {
    "async-stack": "Async client: asyncio stacks for the exec websocket (aiohttp, httpx-ws, ...)",
    "async-exec": "Async client: 200 concurrent execs from one event loop vs 200 threads",
}
PRODUCES = ["async-stack", "async-exec"]
PROFILE = "code-exec"
STACKS = {
    "aiohttp": "aiohttp",
    "httpx-ws": "httpx_ws",
    "websockets": "websockets",
    "asyncio": "asyncio",
}
LABELS = {
    "python": "bare python",
    "aiohttp": "aiohttp (already a dependency, through kopf)",
    "httpx-ws": "httpx + httpx-ws (anyio, httpcore, h11, wsproto)",
    "websockets": "websockets",
    "asyncio": "asyncio streams + a minimal RFC 6455 client (no dependency)",
}


def _available_stacks() -> list[str]:
    return [name for name, module in STACKS.items() if importlib.util.find_spec(module)]


def _version(name: str) -> str:
    distribution = {"httpx-ws": "httpx-ws", "asyncio": ""}.get(name, name)
    if not distribution:
        return f"Python {sys.version.split()[0]}"
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        return f"{distribution} {importlib.metadata.version(distribution)}"
    return distribution


def _room(ctx: Any, wanted: int) -> tuple[int, str]:
    """How many code-exec Sandboxes fit now (at most `wanted`), and the node's room."""
    cluster_dir = str(Path(__file__).resolve().parents[2] / "cluster")
    if cluster_dir not in sys.path:
        sys.path.insert(0, cluster_dir)
    from tests.cluster.capacity import node_rooms, sandbox_requests
    from tests.cluster.kube import Kube as TestKube

    kube = TestKube(env.KUBECONFIG)
    each = sandbox_requests(kube, PROFILE)
    rooms = node_rooms(kube)
    fitting = sum(room.how_many(each) for room in rooms)
    return min(wanted, fitting), " | ".join(room.describe()[:300] for room in rooms)


@contextlib.contextmanager
def _sandboxes(ctx: Any, count: int) -> Iterator[tuple[str, list[str]]]:
    ns = make_namespace(ctx.kube, f"obx-bench-async-{ctx.run_id}", sandboxes=True)
    ctx.cleanup(delete_namespace, ctx.kube, ns)
    client = Client(ns, kubeconfig=env.KUBECONFIG)
    names = [f"async-{i}" for i in range(count)]
    with concurrent.futures.ThreadPoolExecutor(count) as pool:
        boxes = list(pool.map(lambda n: client.create(PROFILE, n, timeout=300), names))
    try:
        yield ns, [box.name for box in boxes]
    finally:
        for box in boxes:
            with contextlib.suppress(Exception):
                box.delete()


# --------------------------------------------------------------------------- stacks


def _stack_probe(stack: str, settings: dict[str, Any]) -> dict[str, Any]:
    completed = subprocess.run(
        [sys.executable, "-m", "bench.async_stacks", stack, json.dumps(settings)],
        capture_output=True,
        timeout=300,
        check=False,
        cwd=Path(__file__).resolve().parents[2],
    )
    if completed.returncode != 0:
        raise RuntimeError(f"{stack}: {completed.stderr.decode()[-800:]}")
    data: dict[str, Any] = json.loads(completed.stdout.decode().strip().splitlines()[-1])
    return data


def _stacks(ctx: Any, section: Section, ns: str, pod: str) -> None:
    credentials = Session.discover(env.KUBECONFIG).credentials
    settings = {
        "host": credentials.server,
        "ca": credentials.ca_file,
        "cert": credentials.cert_file,
        "key": credentials.key_file,
        "token": credentials.token,
        "namespace": ns,
        "pod": pod,
        "sequential": ctx.n(20, 3),
        "batch": ctx.n(50, 5),
    }
    stacks = _available_stacks()
    rounds = ctx.n(1, 1)
    samples: dict[str, list[dict[str, Any]]] = {name: [] for name in ["python", *stacks]}
    for _ in range(rounds):  # interleaved, so drift in the node's load falls on all alike
        samples["python"].append(_stack_probe("python", {}))
        for stack in stacks:
            try:
                samples[stack].append(_stack_probe(stack, settings))
            except (RuntimeError, ValueError, subprocess.TimeoutExpired) as error:
                section.notes.append(f"{stack} failed: {str(error)[-300:]}")
            ctx.log(f"async-stack: {stack} round done")
    stacks = [stack for stack in stacks if samples[stack]]
    bare = samples["python"]
    section.figure(
        "async_stack.import.python",
        "import time: bare python",
        "ms",
        [s["import_ms"] for s in bare],
    )
    section.figure(
        "async_stack.rss_import.python",
        "RSS after the imports: bare python",
        "MiB",
        [s["rss_import"] / 1024 for s in bare],
    )
    rows = []
    for stack in stacks:
        runs = samples[stack]
        label = LABELS[stack]
        imports = section.figure(
            f"async_stack.import.{stack}",
            f"import time (fresh interpreter): {label}",
            "ms",
            [s["import_ms"] for s in runs],
            baseline="async_stack.import.aiohttp" if stack != "aiohttp" else None,
        )
        rss = section.figure(
            f"async_stack.rss_import.{stack}",
            f"RSS after the imports: {label}",
            "MiB",
            [s["rss_import"] / 1024 for s in runs],
            floor="async_stack.rss_import.python",
        )
        peak = section.figure(
            f"async_stack.rss_peak.{stack}",
            f"peak RSS after {settings['batch']} concurrent execs: {label}",
            "MiB",
            [s["rss_peak"] / 1024 for s in runs],
        )
        sequential = section.figure(
            f"async_stack.exec.{stack}",
            f"exec `printf 42`, one at a time: {label}",
            "ms",
            [ms for s in runs for ms in s["sequential_ms"]],
            baseline="async_stack.exec.aiohttp" if stack != "aiohttp" else None,
        )
        batch = section.figure(
            f"async_stack.batch.{stack}",
            f"{settings['batch']} concurrent execs of `true`, wall time: {label}",
            "ms",
            [s["batch_ms"] for s in runs],
            baseline="async_stack.batch.aiohttp" if stack != "aiohttp" else None,
        )
        wrong = sum(s["wrong"] for s in runs) + sum(s["batch_wrong"] for s in runs)
        errors = sorted({e for s in runs for e in s.get("batch_errors") or []})
        rows.append(
            [
                f"{label} ({_version(stack)})",
                f"{imports.center:.0f}",
                f"{rss.center:.1f}",
                f"{peak.center:.1f}",
                f"{sequential.center:.1f}",
                f"{batch.center:.0f}",
                f"{wrong} of {len(runs) * (settings['sequential'] + settings['batch'])}",
                "; ".join(errors)[:200],
            ]
        )
    section.table(
        "p50 per stack (exec: v5.channel.k8s.io over TLS with the kubeconfig's client "
        f"certificate, {rounds} fresh interpreters each)",
        [
            "stack",
            "import ms",
            "RSS after import MiB",
            f"peak RSS, {settings['batch']} execs MiB",
            "exec ms (1 at a time)",
            f"{settings['batch']} at once, wall ms",
            "wrong or failed",
            "errors",
        ],
        rows,
    )
    section.notes.append(
        f"Bare python: {section.figures[0].center:.1f} ms of imports, "
        f"{section.figures[1].center:.1f} MiB RSS. The exec calls here are raw pods/exec "
        "(no supervisor), the same request for every stack."
    )


# --------------------------------------------------------------------------- concurrency


async def _async_round(client: AsyncClient, ns: str, names: list[str], n: int) -> dict[str, Any]:
    boxes = [await client.get(name, ns) for name in names]
    threads_peak = threading.active_count()
    done = asyncio.Event()

    async def watch_threads() -> None:
        nonlocal threads_peak
        while not done.is_set():
            threads_peak = max(threads_peak, threading.active_count())
            await asyncio.sleep(0.01)

    async def one(i: int) -> tuple[float, bool]:
        started = time.perf_counter()
        try:
            result = await boxes[i % len(boxes)].exec(["true"])
        except Exception:
            return (time.perf_counter() - started) * 1000, False
        return (time.perf_counter() - started) * 1000, result.exit_code == 0

    watcher = asyncio.create_task(watch_threads())
    started = time.perf_counter()
    results = await asyncio.gather(*(one(i) for i in range(n)))
    wall = (time.perf_counter() - started) * 1000
    done.set()
    await watcher
    return {
        "latencies": [ms for ms, _ in results],
        "failed": sum(1 for _, ok in results if not ok),
        "wall_ms": wall,
        "threads_peak": threads_peak,
    }


def _sync_round(client: Client, ns: str, names: list[str], n: int) -> dict[str, Any]:
    boxes = [client.get(name, ns) for name in names]
    barrier = threading.Barrier(n + 1)
    latencies: list[float] = [0.0] * n
    ok: list[bool] = [False] * n

    def one(i: int) -> None:
        barrier.wait()
        started = time.perf_counter()
        try:
            ok[i] = boxes[i % len(boxes)].exec(["true"]).exit_code == 0
        except Exception:
            ok[i] = False
        latencies[i] = (time.perf_counter() - started) * 1000

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(n)]
    for thread in threads:
        thread.start()
    threads_peak = threading.active_count()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join(600)
    wall = (time.perf_counter() - started) * 1000
    return {
        "latencies": latencies,
        "failed": ok.count(False),
        "wall_ms": wall,
        "threads_peak": threads_peak,
    }


def _concurrency(ctx: Any, section: Section, ns: str, names: list[str]) -> None:
    n = ctx.n(200, 10)
    rounds = ctx.n(2, 1)
    sync_client = Client(ns, kubeconfig=env.KUBECONFIG)
    async_client = AsyncClient(ns, kubeconfig=env.KUBECONFIG)
    loop = asyncio.new_event_loop()
    targets = {"one": names[:1]}
    if len(names) > 1:
        targets[f"spread{len(names)}"] = names
    samples: dict[tuple[str, str], list[dict[str, Any]]] = {}
    try:
        for box in names:  # warm both paths: connections, TLS, the supervisor's pages
            sync_client.get(box, ns).exec(["true"])
            loop.run_until_complete(_async_round(async_client, ns, [box], 2))
        # One pair of rounds (async, then the sync baseline) per target, then again: the
        # figures are written after each pair, so an interrupted run keeps what it measured.
        for _ in range(rounds):
            for target, boxes in targets.items():
                samples.setdefault(("async", target), []).append(
                    loop.run_until_complete(_async_round(async_client, ns, boxes, n))
                )
                ctx.log(f"async-exec: async {target} round done")
                samples.setdefault(("sync", target), []).append(
                    _sync_round(sync_client, ns, boxes, n)
                )
                ctx.log(f"async-exec: sync {target} round done")
                _write_concurrency(section, samples, targets, n)
        loop.run_until_complete(async_client.aclose())
    finally:
        loop.close()


def _write_concurrency(
    section: Section,
    samples: dict[tuple[str, str], list[dict[str, Any]]],
    targets: dict[str, list[str]],
    n: int,
) -> None:
    rows = []
    for target, boxes in targets.items():
        if ("sync", target) not in samples:
            continue
        where = "one sandbox" if target == "one" else f"{len(boxes)} sandboxes"
        for kind in ("sync", "async"):
            runs = samples[(kind, target)]
            label = (
                f"AsyncClient, one event loop, {where}"
                if kind == "async"
                else f"Client on {n} threads, {where} (baseline)"
            )
            latency = section.figure(
                f"async_exec.latency.{kind}.{target}",
                f"{n} concurrent exec `true`, per call: {label}",
                "ms",
                [ms for r in runs for ms in r["latencies"]],
                baseline=f"async_exec.latency.sync.{target}" if kind == "async" else None,
            )
            wall = section.figure(
                f"async_exec.wall.{kind}.{target}",
                f"{n} concurrent exec `true`, wall time of the round: {label}",
                "ms",
                [r["wall_ms"] for r in runs],
                baseline=f"async_exec.wall.sync.{target}" if kind == "async" else None,
            )
            failed = sum(r["failed"] for r in runs)
            peak = max(r["threads_peak"] for r in runs)
            rows.append(
                [
                    label,
                    f"{latency.center:.0f}",
                    f"{latency.stats['p95']:.0f}",
                    f"{wall.center:.0f}",
                    f"{n * 1000 / wall.center:.1f}" if wall.center else "",
                    peak,
                    f"{failed} of {n * len(runs)}",
                ]
            )
    section.tables = [t for t in section.tables if "concurrent `sandbox.exec" not in t["title"]]
    rounds = len(samples[("sync", "one")])
    section.table(
        f"{n} concurrent `sandbox.exec(['true'])`, {rounds} round(s) each, interleaved",
        [
            "client",
            "p50 per call ms",
            "p95 per call ms",
            "p50 wall ms",
            "execs/s",
            "peak threads",
            "failed",
        ],
        rows,
    )


def run(ctx: Any, *sections: Section) -> None:
    by_name = {section.name: section for section in sections}
    wanted = 1 if ctx.quick else max(1, int(getattr(ctx.args, "async_sandboxes", 3)))
    count, room = _room(ctx, wanted)
    if count < 1:
        raise RuntimeError(f"no room for one {PROFILE} Sandbox: {room}")
    for section in sections:
        if count < wanted:
            section.notes.append(
                f"room for {count} of the {wanted} {PROFILE} Sandboxes asked for: {room}"
            )
    with _sandboxes(ctx, count) as (ns, names):
        if "async-stack" in by_name:
            pod = Client(ns, kubeconfig=env.KUBECONFIG).get(names[0], ns).pod
            _stacks(ctx, by_name["async-stack"], ns, pod)
        if "async-exec" in by_name:
            _concurrency(ctx, by_name["async-exec"], ns, names)
    for section in sections:
        section.notes.append(
            f"{PROFILE} Sandboxes under gVisor; client and cluster on the same machine. "
            + ", ".join(_version(s) for s in ["aiohttp", *_available_stacks()])
            + "."
        )
