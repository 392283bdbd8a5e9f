"""kubernetes-sigs/agent-sandbox's controller as a baseline: built from the Go module
proxy when the bench runs (its code is never committed here), its CRDs installed, and
its controller run out of cluster with the admin's kubeconfig; all of it removed again.

Out of cluster, not as a pod: its published image cannot be pulled on this machine, and
a process on the node talks to the same API server over the same loopback as the
embedded cluster's own controllers, so it pays no network hop that an in-cluster pod
would not also pay on a one-node cluster. Its CPU is read from /proc like the operator's.
Flags are its defaults except `--extensions` (the warm pool and claim controllers),
`--leader-elect=false` (out of cluster it would need a namespace for its Lease; one
replica needs no election) and loopback-only metrics and probe ports.
"""

from __future__ import annotations

import os
import socket
import urllib.request
from pathlib import Path
from typing import IO

from bench import env, go_tools
from bench.agent_sandbox_objects import CRDS

MODULE = "sigs.k8s.io/agent-sandbox"
VERSION = "v1.0.1"
PACKAGE = "./cmd/agent-sandbox-controller"
CACHE = go_tools.CACHE_ROOT / f"agent-sandbox-{VERSION}"
CRD_FOLDER = "k8s/crds"
CRD_DIR = CACHE / CRD_FOLDER
BINARY = CACHE / "agent-sandbox-controller"
METRICS_ADDRESS = ("127.0.0.1", 18080)
PROBE_ADDRESS = ("127.0.0.1", 18081)
PID_FILE = env.BENCH_RUN / "agent-sandbox-controller.pid"
LOG_DIR = env.BENCH_STATE / "agent-sandbox"


def build(log: IO[str] | None = None) -> Path:
    """The controller's binary and its CRDs, built once per version."""
    return go_tools.build_module_binary(
        MODULE, VERSION, PACKAGE, CACHE, keep=(CRD_FOLDER,), log=log
    )


def install_crds() -> None:
    env.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_DIR), timeout=120)
    env.kubectl(
        "wait", "--for", "condition=Established", "--timeout=60s", *(f"crd/{c}" for c in CRDS)
    )


def remove_crds() -> None:
    """Deletes its CRDs, and with them every object of theirs still there."""
    env.kubectl(
        "delete", "crd", "--ignore-not-found", "--wait=true", "--timeout=180s", *CRDS, timeout=200
    )
    # kubectl's discovery cache still maps the plural `sandboxes` to agents.x-k8s.io for
    # hours: a later `kubectl get sandboxes` then asks for a kind that is gone. Fetching
    # discovery again writes the cache anew.
    env.kubectl("api-resources", "--cached=false", "-o", "name", timeout=60)


def _port_free(address: tuple[str, int]) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(address) != 0


def _ready() -> bool:
    url = f"http://{PROBE_ADDRESS[0]}:{PROBE_ADDRESS[1]}/readyz"
    with urllib.request.urlopen(url, timeout=2) as answer:
        return bool(answer.status == 200)


class Controller(go_tools.BackgroundProcess):
    """The controller process, in a session of its own so that only it is signalled."""

    def __init__(self, binary: Path, run_id: str) -> None:
        super().__init__(binary, LOG_DIR / f"controller-{run_id}.log", PID_FILE)

    def start_controller(self, timeout: float = 60) -> None:
        for address in (METRICS_ADDRESS, PROBE_ADDRESS):
            if not _port_free(address):
                raise RuntimeError(f"{address[0]}:{address[1]} is taken: another controller?")
        self.start(
            [
                "--extensions",
                "--leader-elect=false",
                f"--metrics-bind-address={METRICS_ADDRESS[0]}:{METRICS_ADDRESS[1]}",
                f"--health-probe-bind-address={PROBE_ADDRESS[0]}:{PROBE_ADDRESS[1]}",
            ],
            {**os.environ, "KUBECONFIG": env.KUBECONFIG},
            _ready,
            what="the controller",
            timeout=timeout,
        )


def stop_leftover(notes: list[str]) -> None:
    """A controller an interrupted run left running (by its pid file, if it is ours)."""
    go_tools.stop_leftover(PID_FILE, BINARY, "agent-sandbox controller", notes)


def remove_leftovers(notes: list[str]) -> None:
    """What an interrupted run left: its controller, then its CRDs (and their objects)."""
    stop_leftover(notes)
    found = env.kubectl("get", "crd", "-o", "name", *CRDS, "--ignore-not-found", check=False)
    if found.strip():
        remove_crds()
        notes.append("deleted agent-sandbox's CRDs left by an interrupted run")
