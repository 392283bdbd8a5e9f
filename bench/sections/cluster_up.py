"""Cold and warm `cluster/cluster.sh up`: only with `--only cluster-up`.

It stops the embedded cluster (`cluster.sh down`) and starts it again, so everything
running on it is lost: never part of a default run. Warm: binaries and images cached.
Cold (`--cold` as well): an empty build cache, so Kubernetes, etcd, kube-router,
containerd and gVisor are built from source again, with empty Go build and module
caches as on a new machine (hours on 2 cores), and the images rebuilt; the old cache is
left where it is and a fresh one is made in a temporary directory.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import env
from bench.results import Section

NEEDS_CLUSTER = False
TITLES = {"cluster-up": "Cold and warm `cluster/cluster.sh up` (only with --only cluster-up)"}
CLUSTER = env.REPO / "cluster" / "cluster.sh"


def _timed(argv: list[str], extra_env: dict[str, str] | None = None) -> float:
    started = time.monotonic()
    import subprocess

    subprocess.run(argv, check=True, env={**os.environ, **(extra_env or {})}, timeout=6 * 3600)
    return time.monotonic() - started


def _node_ready_after(started: float) -> float:
    while time.monotonic() - started < 600:
        out = env.kubectl(
            "get",
            "nodes",
            "-o",
            "jsonpath={.items[*].status.conditions[-1:].status}",
            check=False,
            timeout=20,
        )
        if "True" in out:
            return time.monotonic() - started
        time.sleep(0.5)
    raise TimeoutError("the node did not become Ready within 600 s")


def run(ctx: Any, section: Section) -> None:
    python = str(env.REPO / ".venv" / "bin" / "python")
    extra = {"PYTHON": python}
    repeats = ctx.n(3, 1)
    down, warm, ready, make_up = [], [], [], []
    for _ in range(repeats):
        down.append(_timed([str(CLUSTER), "down"], extra))
        started = time.monotonic()
        warm.append(_timed([str(CLUSTER), "up"], extra))
        ready.append(_node_ready_after(started))
        # `make up`'s remaining steps: install the operator, create a Sandbox, print 42.
        make_up.append(_timed([python, str(env.REPO / "cluster" / "embedded.py"), "up"], extra))
        ctx.log(f"cluster-up: warm up {warm[-1]:.1f}s")
    section.figure("cluster_up.down", "cluster.sh down", "s", down)
    section.figure("cluster_up.warm", "warm cluster.sh up (caches full)", "s", warm, headline=True)
    section.figure("cluster_up.warm_node_ready", "warm up until the node is Ready", "s", ready)
    section.figure(
        "cluster_up.operator_and_42",
        "then embedded.py up: operator installed, Sandbox created, 42 printed",
        "s",
        make_up,
    )
    if ctx.args.cold:
        cache = Path(tempfile.mkdtemp(prefix="openblox-cold-cache-"))
        # A new machine has no Go build or module cache either: without these, "cold"
        # would only relink what Go already compiled.
        cold_env = {
            **extra,
            "OPENBLOX_CACHE": str(cache),
            "GOCACHE": str(cache / "go-build"),
            "GOMODCACHE": str(cache / "go-mod"),
        }
        _timed([str(CLUSTER), "down"], extra)
        install = _timed([str(CLUSTER), "install"], cold_env)
        up = _timed([str(CLUSTER), "up"], cold_env)
        section.figure(
            "cluster_up.cold_install", "cold install (build everything)", "s", value=install
        )
        section.figure(
            "cluster_up.cold_up",
            "cold up after the build",
            "s",
            value=up,
            baseline="cluster_up.warm",
        )
        # Leave the node as it was found: running from the usual cache, the cold one gone.
        _timed([str(CLUSTER), "down"], extra)
        _timed([str(CLUSTER), "up"], extra)
        shutil.rmtree(cache, ignore_errors=True)
        section.notes.append(
            "Cold: a new, empty cache directory and empty Go build and module caches; "
            "every component built from source through the Go module proxy, the images "
            "built by debootstrap and pip. Afterwards the node was moved back to the usual "
            "cache and the cold one removed."
        )
    else:
        section.notes.append("cold up not measured: it needs --cold (rebuilds from source)")
