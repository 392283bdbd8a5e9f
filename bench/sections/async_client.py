"""The async client: which asyncio stack for the exec websocket (ADR 0011).

`async-stack`: each candidate stack in a fresh interpreter (`bench/async_stacks.py`):
import time and RSS after the imports, then from one event loop pods/exec of `printf 42`
one after another (p50, wrong answers) and a batch of execs of `true` at once (wall time,
peak RSS). `python -c pass` is the floor for import and RSS. Many execs through
`openblox.AsyncClient` itself: `async-exec` (bench/sections/async_exec.py).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench import env
from bench.results import Section
from bench.sections.async_exec import PROFILE, room_for, sandboxes
from openblox.client import Client
from openblox.transport.session import Session

TITLES = {
    "async-stack": "Async client: asyncio stacks for the exec websocket (aiohttp, httpx-ws, ...)"
}
PRODUCES = ["async-stack"]
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


def run(ctx: Any, section: Section) -> None:
    fitting, room = room_for(1)
    if fitting < 1:
        raise RuntimeError(
            f"async-stack needs one {PROFILE} Sandbox and the node has no room: {room}"
        )
    with sandboxes(ctx, 1, "async-stack") as (ns, names):
        pod = Client(ns, kubeconfig=env.KUBECONFIG).get(names[0], ns).pod
        _stacks(ctx, section, ns, pod)
    section.notes.append(
        f"{PROFILE} Sandboxes under gVisor; client and cluster on the same machine. "
        + ", ".join(_version(s) for s in ["aiohttp", *_available_stacks()])
        + "."
    )
