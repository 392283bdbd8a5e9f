"""Create→Ready and host memory per idle Sandbox on one cluster, from this host's /proc.

How the figures in README.md were taken (as root, from the repository's root):

  .venv/bin/python docs/benchmarks/kind-stock-shim/measure.py \
      KUBECONFIG NAMESPACE CREATES IDLE NODE_EXEC

  NODE_EXEC: "docker" (kind: crictl through `docker exec NODE`) or "local" (embedded node).
Creates CREATES Sandboxes one after another (each deleted after Ready), then IDLE Sandboxes
kept, waits 30 s, and sums PSS/RSS of each idle pod's shims and everything under them.
Deletes only what it created.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from bench import memory_parts, page_share, procs

from openblox.client import Client

kubeconfig, namespace, creates, idle, node_exec = sys.argv[1:6]
client = Client(namespace, kubeconfig=kubeconfig)
env = {**os.environ, "KUBECONFIG": kubeconfig}
DOCKER_HOST = "unix:///run/openblox/docker/docker.sock"


def kubectl(*args: str) -> str:
    return subprocess.run(
        ["kubectl", *args], env=env, capture_output=True, text=True, check=True
    ).stdout


def crictl(node: str, *args: str) -> str:
    if node_exec == "docker":
        cmd = ["/usr/bin/docker", "exec", node, "crictl", *args]
        e = {**os.environ, "DOCKER_HOST": DOCKER_HOST}
    else:
        cmd = [
            "/var/lib/openblox/bin/crictl",
            "--runtime-endpoint",
            "unix:///run/openblox/containerd/containerd.sock",
            *args,
        ]
        e = dict(os.environ)
    return subprocess.run(cmd, env=e, capture_output=True, text=True, check=True).stdout


times = []
for i in range(int(creates)):
    started = time.monotonic()
    sbx = client.create("code-exec", name=f"m-c{i}", timeout=300)
    times.append((time.monotonic() - started) * 1000)
    sbx.delete()
    time.sleep(3)
print("create->Ready ms:", [round(t) for t in times], "p50", round(statistics.median(times)))

held = [client.create("code-exec", name=f"m-idle{i}", timeout=300) for i in range(int(idle))]
time.sleep(30)
pods = json.loads(
    kubectl("get", "pods", "-n", namespace, "-l", "openblox.sh/sandbox", "-o", "json")
)["items"]
per_pod = []
all_pids: list[int] = []
pod_pids = {}
table = procs.processes()
for pod in pods:
    if not pod["metadata"]["labels"]["openblox.sh/sandbox"].startswith("m-idle"):
        continue
    node = pod["spec"]["nodeName"]
    sandboxes = json.loads(
        crictl(
            node, "pods", "--namespace", namespace, "--name", pod["metadata"]["name"], "-o", "json"
        )
    )["items"]
    [pod_id] = [p["id"] for p in sandboxes if p["state"] == "SANDBOX_READY"]
    cts = json.loads(crictl(node, "ps", "--pod", pod_id, "-o", "json"))["containers"]
    ids = [pod_id, *(c["id"] for c in cts)]
    shims = procs.shims_for(table, ids)
    pids = procs.descendants(table, shims)
    pod_pids[pod["metadata"]["name"]] = (node, shims, pids)
    all_pids.extend(pids)
extra = page_share.extra_pss(all_pids)
for name, (node, shims, pids) in pod_pids.items():
    kernel = procs.memory_of(pids)
    shared = procs.memory_of(pids, extra)
    rss = kernel["rss"]
    parts = memory_parts.breakdown(pids, extra)
    print(
        name,
        node,
        f"shims={len(shims)} processes={len(pids)}",
        f"PSS(kernel)={kernel['pss'] / 2**20:.1f} MiB",
        f"PSS(own files split among measured)={shared['pss'] / 2**20:.1f} MiB",
        f"RSS={rss / 2**20:.1f} MiB",
    )
    for role_name, part in sorted(parts.items()):
        print(f"    {role_name}: n={part['processes']} pss={part['pss'] / 2**20:.1f} MiB")
    per_pod.append((kernel["pss"], shared["pss"], rss))
medians = [statistics.median(x[i] for x in per_pod) / 2**20 for i in range(3)]
print(
    f"median per idle Sandbox: PSS(kernel) {medians[0]:.1f} MiB,"
    f" PSS(split among measured) {medians[1]:.1f} MiB, RSS {medians[2]:.1f} MiB"
)
for sbx in held:
    sbx.delete()
