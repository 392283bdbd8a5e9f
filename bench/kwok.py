"""Simulated nodes for the `scale` section: kwok (sigs.k8s.io/kwok), built from the Go
module proxy when the bench runs, keeps Node objects Ready against the real API server.

What runs on them: nothing. A pod bound to a simulated node stays Pending (no stage makes
it run), and kwok only finishes the deletion of a pod that is being deleted, as a
kubelet would. So what the section measures is the control plane: the API server, etcd,
the scheduler and the operator.

Fenced off from everything else on the cluster:
- each simulated node is tainted, and only the bench's RuntimeClass tolerates the taint,
  so no real pod (a user's Sandbox, a DaemonSet without a toleration for everything) is
  scheduled there; the node agent's DaemonSet selects `openblox.sh/gvisor=true`, which
  simulated nodes do not carry;
- the bench's RuntimeClass selects only these nodes, so no simulated Sandbox's pod lands
  on the real node;
- the nodes' addresses are 127.0.0.2 on a port nothing listens on: an exec or a log read
  sent to one stays on this machine and is refused.

kwok runs as a process with a client certificate of its own, signed by the embedded
cluster's CA: group `system:masters` (it writes every simulated node's status and Lease)
and a user name in `system:node:`, which the sandbox-pods admission policy lets finish a
pod's deletion, as it lets the kubelets.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import env, go_tools
from bench.cluster_side import SCALE_RUNTIME_CLASS, Kube
from openblox.names import LABEL_GVISOR_READY, NODE_AGENT_NAMESPACE
from openblox.transport import ApiError, NotFound, is_conflict

MODULE = "sigs.k8s.io/kwok"
VERSION = "v0.8.0"
PACKAGE = "./cmd/kwok"
CACHE = go_tools.CACHE_ROOT / f"kwok-{VERSION}"
BINARY = CACHE / "kwok"
STAGE_FOLDER = "kustomize/stage"
PID_FILE = env.BENCH_RUN / "kwok.pid"
STATE = env.BENCH_STATE / "kwok"
CLUSTER_PKI = Path("/var/lib/openblox/cluster/pki")

# Nodes kwok manages carry this annotation (kwok's own convention).
MANAGED_ANNOTATION = "kwok.x-k8s.io/node"
# The bench's label and taint on its simulated nodes, valued with the run's id.
NODE_LABEL = "openblox.sh/bench-kwok"
RUNTIME_CLASS = SCALE_RUNTIME_CLASS
# An address of this machine's loopback with nothing on the port: see the module doc.
NODE_IP = "127.0.0.2"
NODE_PORT = 1
# What each simulated node offers: room for 200 pods of the bench's profile.
ALLOCATABLE = {"cpu": "64", "memory": "256Gi", "ephemeral-storage": "1Ti", "pods": "200"}
# The node agent renews its Lease every 10 s and it lapses after 40 (ADR 0020).
AGENT_LEASE_SECONDS = 40
AGENT_RENEW_SECONDS = 10.0

# kwok's stage that makes a new simulated node Ready: ours, because kwok's own leaves
# out ephemeral-storage (every sandbox pod asks for some) and the runtime handlers.
NODE_READY_STAGE = f"""\
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: openblox-node-ready
spec:
  resourceRef:
    apiGroup: v1
    kind: Node
  selector:
    matchExpressions:
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: 'NotIn'
      values: ['True']
  next:
    statusTemplate: |
      {{{{ $now := Now }}}}
      conditions:
      {{{{ range NodeConditions }}}}
      - lastHeartbeatTime: {{{{ $now | Quote }}}}
        lastTransitionTime: {{{{ $now | Quote }}}}
        message: {{{{ .message | Quote }}}}
        reason: {{{{ .reason | Quote }}}}
        status: {{{{ .status | Quote }}}}
        type: {{{{ .type | Quote }}}}
      {{{{ end }}}}
      addresses:
      - address: {NODE_IP}
        type: InternalIP
      daemonEndpoints:
        kubeletEndpoint:
          Port: {NODE_PORT}
      allocatable: {json.dumps(ALLOCATABLE)}
      capacity: {json.dumps(ALLOCATABLE)}
      runtimeHandlers:
      - name: runsc
        features: {{recursiveReadOnlyMounts: false, userNamespaces: false}}
      nodeInfo:
        architecture: amd64
        operatingSystem: linux
        kubeletVersion: simulated-by-kwok-{VERSION}
        kubeProxyVersion: simulated-by-kwok-{VERSION}
        containerRuntimeVersion: simulated
        bootID: ""
        kernelVersion: ""
        machineID: ""
        osImage: ""
        systemUUID: ""
      phase: Running
"""
# kwok's own stages, read from its module: the node heartbeat (with a node Lease in
# kube-node-lease) and a pod's deletion once it is being deleted.
MODULE_STAGES = (
    "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "pod/fast/pod-delete.yaml",
)


def build() -> Path:
    return go_tools.build_module_binary(MODULE, VERSION, PACKAGE, CACHE, keep=(STAGE_FOLDER,))


def write_config(directory: Path) -> Path:
    documents = [NODE_READY_STAGE]
    documents += [(CACHE / STAGE_FOLDER / stage).read_text() for stage in MODULE_STAGES]
    path = directory / "kwok.yaml"
    path.write_text("\n---\n".join(document.strip() + "\n" for document in documents))
    return path


def write_credentials(directory: Path) -> Path:
    """kwok's kubeconfig, with a client certificate signed by the cluster's CA."""
    env.use_test_helpers()
    import pki  # cluster/pki.py

    if not (CLUSTER_PKI / "ca.key").exists():
        raise RuntimeError(
            f"{CLUSTER_PKI}/ca.key is missing: the scale section runs on the embedded cluster"
        )
    ca, ca_key = pki.ensure_ca(CLUSTER_PKI)
    own = directory / "pki"
    own.mkdir(parents=True, exist_ok=True)
    shutil.copy(CLUSTER_PKI / "ca.crt", own / "ca.crt")
    leaf = pki.Leaf(
        "bench-kwok", "system:node:openblox-bench-kwok", "system:masters", (pki.CLIENT,)
    )
    pki.ensure_leaf(own, leaf, ca, ca_key)
    server = Kube().session.server
    pki.write_kubeconfig(directory, "bench-kwok", server)
    return directory / "bench-kwok.kubeconfig"


class Kwok(go_tools.BackgroundProcess):
    def __init__(self, run_id: str) -> None:
        super().__init__(BINARY, STATE / f"kwok-{run_id}.log", PID_FILE)
        self._started = 0.0

    def start_kwok(self, kubeconfig: Path, config: Path) -> None:
        self._started = time.monotonic()
        self.start(
            [
                f"--kubeconfig={kubeconfig}",
                f"--config={config}",
                f"--manage-nodes-with-annotation-selector={MANAGED_ANNOTATION}=fake",
                f"--node-ip={NODE_IP}",
                "--node-lease-duration-seconds=40",
                "--server-address=",
            ],
            {**os.environ, "KUBECONFIG": str(kubeconfig)},
            # It has no health endpoint without its server: alive for two seconds is
            # started; the section then waits for the nodes it makes Ready.
            lambda: time.monotonic() - self._started > 2,
            what="kwok",
        )


def stop_leftover(notes: list[str]) -> None:
    go_tools.stop_leftover(PID_FILE, BINARY, "kwok", notes)


# --------------------------------------------------------------------------- nodes


def node_name(run_id: str, index: int) -> str:
    return f"obx-kwok-{run_id}-{index:04d}"


def node_body(run_id: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {MANAGED_ANNOTATION: "fake"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "type": "kwok",
                NODE_LABEL: run_id,
                LABEL_GVISOR_READY: "true",
            },
        },
        "spec": {"taints": [{"key": NODE_LABEL, "value": run_id, "effect": "NoSchedule"}]},
    }


def runtime_class(run_id: str) -> dict[str, Any]:
    return {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": RUNTIME_CLASS, "labels": {NODE_LABEL: run_id}},
        "handler": "runsc",
        "scheduling": {
            "nodeSelector": {NODE_LABEL: run_id},
            "tolerations": [{"key": NODE_LABEL, "operator": "Exists", "effect": "NoSchedule"}],
        },
    }


def create(kube: Kube, path: str, body: dict[str, Any]) -> None:
    try:
        kube.request("POST", path, body)
    except ApiError as error:
        if not is_conflict(error):
            raise


def ready_nodes(kube: Kube, run_id: str) -> int:
    nodes = kube.get("/api/v1/nodes", labelSelector=f"{NODE_LABEL}={run_id}").get("items") or []
    return sum(
        1
        for node in nodes
        for condition in (node.get("status") or {}).get("conditions") or []
        if condition.get("type") == "Ready" and condition.get("status") == "True"
    )


def remove_nodes(kube: Kube, selector: str = NODE_LABEL) -> int:
    """Deletes the simulated nodes (all runs' with the default selector), their agent
    Leases and the bench's RuntimeClass; how many nodes it deleted."""
    nodes = kube.get("/api/v1/nodes", labelSelector=selector).get("items") or []
    for node in nodes:
        name = node["metadata"]["name"]
        with contextlib.suppress(NotFound):
            kube.request("DELETE", f"/api/v1/nodes/{name}")
        with contextlib.suppress(NotFound):
            kube.request("DELETE", agent_lease_path(name))
    with contextlib.suppress(NotFound):
        kube.request("DELETE", f"/apis/node.k8s.io/v1/runtimeclasses/{RUNTIME_CLASS}")
    return len(nodes)


def agent_lease_path(node: str = "") -> str:
    base = f"/apis/coordination.k8s.io/v1/namespaces/{NODE_AGENT_NAMESPACE}/leases"
    return f"{base}/{node}" if node else base


class AgentLeases:
    """What the node agent does for its node's readiness, for each simulated node: a
    Lease in the agent's namespace, renewed every 10 s. Without it the operator takes
    the ready label off a node within 40 s (its agent has gone quiet)."""

    def __init__(self, kube: Kube, nodes: list[str]) -> None:
        self._kube = kube
        self._nodes = nodes
        self._stop = threading.Event()
        self.renewals = 0
        self.failures = 0
        self._thread = threading.Thread(target=self._run, daemon=True, name="agent-leases")

    def start(self) -> None:
        self._renew_all()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.wait(AGENT_RENEW_SECONDS):
            self._renew_all()

    def _renew_all(self) -> None:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        for node in self._nodes:
            if self._stop.is_set():
                return
            spec = {
                "holderIdentity": f"bench-kwok/{node}",
                "leaseDurationSeconds": AGENT_LEASE_SECONDS,
                "renewTime": now,
            }
            try:
                try:
                    self._kube.request(
                        "PATCH",
                        agent_lease_path(node),
                        {"spec": spec},
                        content_type="application/merge-patch+json",
                    )
                except NotFound:
                    body = {
                        "apiVersion": "coordination.k8s.io/v1",
                        "kind": "Lease",
                        "metadata": {"name": node, "labels": {NODE_LABEL: "true"}},
                        "spec": spec,
                    }
                    self._kube.request("POST", agent_lease_path(), body)
                self.renewals += 1
            except Exception:
                self.failures += 1
