"""The node agent on the embedded node (ADR 0020): it prepares the node, says so on the
Node, and the node gets no sandbox pod while the agent is missing, stopped, wedged, or
finds something wrong.

The embedded node is this machine, so a test may change what the agent reads on it (the
seccomp file, runsc's options) and stop the agent's process; each puts back what it
changed, and waits until the node is ready again before it ends.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from openblox.names import (
    CONDITION_NODE_AGENT,
    LABEL_GVISOR_READY,
    NODE_AGENT_NAMESPACE,
)
from tests.cluster.capacity import require_sandbox_room
from tests.cluster.kubectl import Kube
from tests.cluster.sandboxes import opt_in, pod_of, ready_condition, sandbox, wait_for, wait_reason

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
SHIPPED_SECCOMP = (REPO / "node-agent" / "sandbox-seccomp.json").read_bytes()
SECCOMP_ON_NODE = Path("/var/lib/kubelet/seccomp/openblox/sandbox.json")
RUNSC_CONFIG = Path("/etc/containerd/runsc.toml")
DAEMONSET = "daemonset/openblox-node-agent"
CRICTL = Path("/var/lib/openblox/bin/crictl")
CRI_ENDPOINT = "unix:///run/openblox/containerd/containerd.sock"
# A round is 10 s; the Lease lapses after 40 s and the operator looks every 10 s.
ROUND = 10
LAPSE = 40 + 10 + ROUND


def _node(kube: Kube) -> dict[str, Any]:
    (node,) = json.loads(kube.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    return dict(node)


def _condition(node: dict[str, Any]) -> dict[str, Any]:
    for condition in node["status"].get("conditions") or []:
        if condition["type"] == CONDITION_NODE_AGENT:
            return dict(condition)
    return {}


def _ready(kube: Kube) -> bool:
    return bool(_node(kube)["metadata"]["labels"].get(LABEL_GVISOR_READY) == "true")


def _wait_ready(kube: Kube, ready: bool, timeout: float = 60) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        node = _node(kube)
        labelled = node["metadata"]["labels"].get(LABEL_GVISOR_READY) == "true"
        return node if labelled == ready else None

    state = "ready" if ready else "not ready"
    node: dict[str, Any] = wait_for(f"node {state} ({LABEL_GVISOR_READY})", probe, timeout)
    return node


def _agent_events(kube: Kube, reason: str) -> list[dict[str, Any]]:
    out = kube.kubectl("get", "events", "-n", "default", "-o", "json").stdout
    return [e for e in json.loads(out)["items"] if e.get("reason") == reason]


def _agent_pod(kube: Kube) -> dict[str, Any]:
    """The embedded node's agent pod (it is the cluster's one node)."""
    pods = json.loads(
        kube.kubectl(
            "get",
            "pods",
            "-n",
            NODE_AGENT_NAMESPACE,
            "-l",
            "app.kubernetes.io/name=openblox-node-agent",
            "-o",
            "json",
        ).stdout
    )["items"]
    (pod,) = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    return dict(pod)


def _agent_pid(kube: Kube) -> int:
    """The agent's process on the embedded node (the kind nodes' agents run on this
    machine too, so it is found through the embedded node's containerd)."""
    container = _agent_pod(kube)["status"]["containerStatuses"][0]["containerID"].partition("://")[
        2
    ]
    inspected = subprocess.run(
        [str(CRICTL), "--runtime-endpoint", CRI_ENDPOINT, "inspect", container],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(json.loads(inspected.stdout)["info"]["pid"])


@contextmanager
def _agent_off_the_node(kube: Kube) -> Iterator[None]:
    """The DaemonSet patched so it no longer runs here; put back after."""
    patch = {"spec": {"template": {"spec": {"nodeSelector": {"openblox.sh/no-agent-here": "x"}}}}}
    undo = {"spec": {"template": {"spec": {"nodeSelector": {"openblox.sh/no-agent-here": None}}}}}
    kube.kubectl(
        "patch", DAEMONSET, "-n", NODE_AGENT_NAMESPACE, "--type=merge", "-p", json.dumps(patch)
    )
    try:
        yield
    finally:
        kube.kubectl(
            "patch", DAEMONSET, "-n", NODE_AGENT_NAMESPACE, "--type=merge", "-p", json.dumps(undo)
        )
        kube.kubectl("rollout", "status", DAEMONSET, "-n", NODE_AGENT_NAMESPACE, "--timeout=120s")
        _wait_ready(kube, True, 90)


def test_the_agent_installs_the_profile_connects_the_plugin_and_labels_the_node(
    operator: Kube,
) -> None:
    node = _wait_ready(operator, True)
    condition = _condition(node)
    assert condition.get("status") == "True", condition
    assert condition.get("reason") == "Prepared", condition
    assert SECCOMP_ON_NODE.read_bytes() == SHIPPED_SECCOMP
    lease = operator.get("lease", node["metadata"]["name"], NODE_AGENT_NAMESPACE)
    assert lease["spec"]["holderIdentity"].startswith("openblox-node-agent-"), lease["spec"]
    runtime_class = operator.get("runtimeclass", "gvisor")
    assert runtime_class["scheduling"]["nodeSelector"] == {LABEL_GVISOR_READY: "true"}


def test_a_node_without_its_agent_gets_no_sandbox_pod_and_running_ones_keep_their_protections(
    operator: Kube, namespace: str
) -> None:
    require_sandbox_room(operator, "code-exec", 2)
    opt_in(operator, namespace)
    operator.apply(sandbox("before", namespace))
    wait_reason(operator, "before", namespace, "Ready", 180)
    before_pod = pod_of(operator, "before", namespace)
    with _agent_off_the_node(operator):
        # The agent, stopped, takes the label off itself before it goes.
        node = _wait_ready(operator, False, 60)
        condition = _condition(node)
        assert condition.get("status") == "False", condition
        assert condition.get("reason") == "AgentStopped", condition
        operator.apply(sandbox("during", namespace))
        time.sleep(ROUND)
        body = wait_for(
            "the new Sandbox to say why it has no node",
            lambda: (
                b
                if (b := operator.get("sandbox", "during", namespace))
                and ready_condition(b).get("status") == "False"
                and LABEL_GVISOR_READY in (ready_condition(b).get("message") or "")
                else None
            ),
            60,
        )
        assert ready_condition(body).get("reason") == "RuntimeUnavailable", body["status"]
        pods = json.loads(operator.kubectl("get", "pods", "-n", namespace, "-o", "json").stdout)[
            "items"
        ]
        during = [p for p in pods if p["metadata"]["name"].startswith("during")]
        assert all(not p["spec"].get("nodeName") for p in during), [
            (p["metadata"]["name"], p["spec"].get("nodeName")) for p in during
        ]
        # What the plugin gave the pod that was already running stays with it.
        mounts = operator.exec(
            before_pod, namespace, "cat", "/proc/self/mountinfo", container="sandbox"
        )
        tmp = [line for line in mounts.stdout.splitlines() if line.split()[4:5] == ["/tmp"]]
        assert tmp and "noexec" in tmp[0].split()[5], mounts.stdout
        assert ready_condition(operator.get("sandbox", "before", namespace))["status"] == "True"
    # The agent back: the waiting Sandbox is placed and becomes Ready.
    wait_reason(operator, "during", namespace, "Ready", 180)


def test_a_wedged_agent_loses_its_nodes_label_through_the_operator(operator: Kube) -> None:
    """An agent that cannot speak (stopped with SIGSTOP: its process is there, its Lease
    is not renewed, its NRI connection hangs) cannot take its own label off."""
    node = _wait_ready(operator, True)
    pid = _agent_pid(operator)
    os.kill(pid, signal.SIGSTOP)
    try:
        _wait_ready(operator, False, LAPSE + 30)
        events = [
            e
            for e in json.loads(operator.kubectl("get", "events", "-A", "-o", "json").stdout)[
                "items"
            ]
            if e.get("reason") == "NodeAgentSilent"
            and e["involvedObject"].get("name") == node["metadata"]["name"]
        ]
        assert events, "no NodeAgentSilent Event on the node"
        assert "last renewed its Lease" in events[-1]["message"], events[-1]["message"]
    finally:
        os.kill(pid, signal.SIGCONT)
    # Thawed, it finds its label gone and puts it back at its next round.
    _wait_ready(operator, True, 3 * ROUND)


def test_a_changed_seccomp_profile_on_the_node_is_replaced_and_said(operator: Kube) -> None:
    _wait_ready(operator, True)
    seen = len(_agent_events(operator, "SeccompProfileReplaced"))
    try:
        SECCOMP_ON_NODE.write_text('{"defaultAction": "SCMP_ACT_ALLOW"}\n')
        wait_for(
            "the agent to put the shipped profile back",
            lambda: SECCOMP_ON_NODE.read_bytes() == SHIPPED_SECCOMP,
            3 * ROUND,
        )
        wait_for(
            "an Event that says it was replaced",
            lambda: len(_agent_events(operator, "SeccompProfileReplaced")) > seen,
            ROUND,
        )
    finally:
        if SECCOMP_ON_NODE.read_bytes() != SHIPPED_SECCOMP:
            SECCOMP_ON_NODE.write_bytes(SHIPPED_SECCOMP)
    assert _ready(operator)


def test_a_runsc_handler_with_networking_on_takes_the_node_out_and_says_why(
    operator: Kube,
) -> None:
    """Written in place (the agent's file mount keeps its inode), then written back."""
    _wait_ready(operator, True)
    original = RUNSC_CONFIG.read_text()
    assert 'network = "none"' in original
    try:
        with RUNSC_CONFIG.open("r+") as config:
            config.seek(0)
            config.write(original.replace('network = "none"', 'network = "sandbox"'))
            config.truncate()
        node = _wait_ready(operator, False, 3 * ROUND)
        condition = _condition(node)
        assert condition.get("reason") == "RunscNetworkOn", condition
        assert '"sandbox"' in condition.get("message", ""), condition
    finally:
        with RUNSC_CONFIG.open("r+") as config:
            config.seek(0)
            config.write(original)
            config.truncate()
    _wait_ready(operator, True, 3 * ROUND)
    assert _condition(_node(operator)).get("reason") == "Prepared"


def test_the_agents_token_changes_only_its_own_nodes_ready_label_and_lease(
    operator: Kube, tmp_path: Path
) -> None:
    """What RBAC cannot say, the admission policy does: with the agent's own token (bound
    to its pod, so it names its node), any other label, any other Lease is refused."""
    node = _wait_ready(operator, True)["metadata"]["name"]
    pod = _agent_pod(operator)["metadata"]["name"]
    token = operator.kubectl(
        "create",
        "token",
        "openblox-node-agent",
        "-n",
        NODE_AGENT_NAMESPACE,
        "--bound-object-kind",
        "Pod",
        "--bound-object-name",
        pod,
        "--duration",
        "10m",
    ).stdout.strip()
    server = operator.kubectl(
        "config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}"
    ).stdout
    ca = tmp_path / "ca.crt"
    ca.write_bytes(
        base64.b64decode(
            operator.kubectl(
                "config",
                "view",
                "--raw",
                "--minify",
                "-o",
                "jsonpath={.clusters[0].cluster.certificate-authority-data}",
            ).stdout
        )
    )

    config = tmp_path / "agent.kubeconfig"
    config.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "c", "cluster": {"server": server, "certificate-authority": str(ca)}}
                ],
                "users": [{"name": "agent", "user": {"token": token}}],
                "contexts": [{"name": "agent", "context": {"cluster": "c", "user": "agent"}}],
                "current-context": "agent",
            }
        )
    )
    agent = Kube(str(config))

    def as_agent(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return agent.kubectl(*args, stdin=stdin, check=False)

    for refused in (
        as_agent("label", "node", node, "openblox.sh/elsewhere=true"),
        as_agent("label", "node", node, f"{LABEL_GVISOR_READY}=false", "--overwrite"),
        as_agent(
            "create",
            "-f",
            "-",
            stdin=json.dumps(
                {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": f"{node}-other", "namespace": NODE_AGENT_NAMESPACE},
                    "spec": {"holderIdentity": "x"},
                }
            ),
        ),
    ):
        assert refused.returncode != 0, refused.stdout
        assert "the node agent may" in refused.stderr, refused.stderr
    assert _ready(operator)
