"""Find or start a cluster, install openblox on it, and show it working.

Shared by `make up` and the test session, so both stand on the same steps:

    python3 cluster/embedded.py up        # cluster + operator + the 42 demo
    python3 cluster/embedded.py cluster   # only make sure a cluster answers; print KUBECONFIG

With KUBECONFIG pointing at a reachable cluster (k3s, kind, ...) that cluster is used;
otherwise the embedded single-node cluster is started with `cluster/cluster.sh up`.
Before anything is applied, a cluster openblox does not support (an older API server,
ValidatingAdmissionPolicy v1 not served, a gVisor node on containerd 1.x or without a
runsc handler) is refused with the reason (openblox.models.cluster_support).
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import install_images
from openblox.models.cluster_support import (
    ADMISSION_DISCOVERY_PATH,
    VERSION_PATH,
    Finding,
    node_findings,
    refusal,
    server_findings,
    warnings,
)
from openblox.names import (
    CONDITION_NODE_AGENT,
    LABEL_GVISOR_NODE,
    LABEL_GVISOR_READY,
    NODE_AGENT_NAMESPACE,
)

REPO = Path(__file__).resolve().parent.parent
EMBEDDED_KUBECONFIG = Path("/var/lib/openblox/cluster/admin.kubeconfig")
NODE_BIN = Path("/var/lib/openblox/bin")
OPERATOR_NAMESPACE = "openblox-system"
OPERATOR_DEPLOYMENT = "openblox-operator"
PREVIEW_DEPLOYMENT = "openblox-preview"
NODE_AGENT = "openblox-node-agent"
PREVIEW_KEYS_SECRET = "openblox-preview-keys"
DEMO_NAMESPACE = "openblox-demo"
NODES_PATH = "/api/v1/nodes"
# What an install that stopped at a check has done: nothing to undo, nothing disturbed.
NOTHING_INSTALLED = "nothing was installed"
# Where cluster/kind/kind.sh keeps its kubeconfig, and where the image builds are cached.
STATE_ROOT = Path(os.environ.get("OPENBLOX_ROOT", "/var/lib/openblox"))
KIND_STATE = STATE_ROOT / "kind"


def kubectl(
    kubeconfig: str, *args: str, check: bool = True, timeout: float = 120, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    binary = NODE_BIN / "kubectl"
    command = [str(binary) if binary.exists() else "kubectl", "--kubeconfig", kubeconfig, *args]
    result = subprocess.run(
        command, check=False, capture_output=True, text=True, timeout=timeout, input=stdin
    )
    if check and result.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
    return result


def reachable(kubeconfig: str) -> bool:
    try:
        return (
            kubectl(kubeconfig, "get", "--raw", "/readyz", check=False, timeout=10).returncode == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        return False


def ensure_cluster() -> str:
    """A kubeconfig for a cluster that answers: the caller's, else the embedded one."""
    given = os.environ.get("KUBECONFIG")
    if given and given != str(EMBEDDED_KUBECONFIG):
        if not reachable(given):
            raise SystemExit(
                f"KUBECONFIG={given} does not answer; unset it to use the embedded cluster"
            )
        return given
    # Always through `cluster.sh up`, which is quick on a running node: a component whose
    # pinned version changed since it started is restarted on its new binary there.
    started = subprocess.run(
        [str(REPO / "cluster" / "cluster.sh"), "up"],
        check=False,
        env={**os.environ, "PYTHON": sys.executable},
    )
    if started.returncode != 0:
        # cluster.sh has said what is wrong, and what to do; no traceback on top.
        raise SystemExit(started.returncode)
    return str(EMBEDDED_KUBECONFIG)


def _raw(kubeconfig: str, request_path: str) -> object:
    """The JSON body the API server answers at `request_path`; None for a 404. A body that
    is not JSON comes back as its text, for the checks to judge as the garbage it is."""
    result = kubectl(kubeconfig, "get", "--raw", request_path, check=False, timeout=30)
    if result.returncode != 0:
        if "(NotFound)" in result.stderr:
            return None
        raise SystemExit(
            f"could not read {request_path} from the cluster of {kubeconfig}: "
            f"{result.stderr.strip()[-500:]}; {NOTHING_INSTALLED}"
        )
    try:
        body: object = json.loads(result.stdout)
    except ValueError:
        return result.stdout
    return body


def _server_address(kubeconfig: str) -> str:
    shown = kubectl(
        kubeconfig,
        "config",
        "view",
        "--minify",
        "-o",
        "jsonpath={.clusters[0].cluster.server}",
        check=False,
    )
    return shown.stdout.strip() or kubeconfig


def refuse_unsupported(findings: list[Finding]) -> None:
    """Print what could not be checked; exit with the reasons, and no traceback, when
    openblox cannot work on this cluster."""
    for finding in warnings(findings):
        print(f"warning: {finding.message}", file=sys.stderr)
    message = refusal(findings, NOTHING_INSTALLED)
    if message is not None:
        raise SystemExit(message)


def check_server(kubeconfig: str) -> None:
    """The API server's version and the admission API openblox's policies need."""
    refuse_unsupported(
        server_findings(
            _raw(kubeconfig, VERSION_PATH),
            _raw(kubeconfig, ADMISSION_DISCOVERY_PATH),
            _server_address(kubeconfig),
        )
    )


def check_nodes(kubeconfig: str) -> None:
    """The containerd and the runsc handler of every node labelled for gVisor."""
    refuse_unsupported(node_findings(_raw(kubeconfig, NODES_PATH)))


def install_operator(kubeconfig: str) -> None:
    """`kubectl apply -k` of an install overlay over `manifests` that names this tree's
    images by digest, then wait until everything runs them. A cluster openblox does not
    support is refused first, before anything is applied."""
    check_server(kubeconfig)
    if kubeconfig == str(EMBEDDED_KUBECONFIG):
        # Rebuilds (cached by content) and imports the images of the tree as it is now.
        subprocess.run(
            [str(REPO / "cluster" / "cluster.sh"), "images"],
            check=True,
            env={**os.environ, "PYTHON": sys.executable},
        )
        # Its one node has gVisor: the label the gvisor RuntimeClass schedules on, also
        # on a node started before the RuntimeClass had a node selector.
        kubectl(kubeconfig, "label", "nodes", "--all", f"{LABEL_GVISOR_NODE}=true", "--overwrite")
    # After the embedded node's label, so that node is judged as a gVisor node.
    check_nodes(kubeconfig)
    overlay = write_install_overlay(kubeconfig)
    kubectl(kubeconfig, "apply", "--server-side", "--force-conflicts", "-k", str(overlay))
    ensure_preview_keys(kubeconfig)
    # A new build is a new digest, so a new pod template: the rollout is the API's own.
    for workload, namespace in (
        (f"deployment/{OPERATOR_DEPLOYMENT}", OPERATOR_NAMESPACE),
        (f"deployment/{PREVIEW_DEPLOYMENT}", OPERATOR_NAMESPACE),
        (f"daemonset/{NODE_AGENT}", NODE_AGENT_NAMESPACE),
    ):
        kubectl(
            kubeconfig,
            "rollout",
            "status",
            workload,
            "-n",
            namespace,
            "--timeout=180s",
            timeout=200,
        )
    wait_for_prepared_nodes(kubeconfig)
    # Admission refuses every Sandbox until the operator has published its profiles.
    kubectl(
        kubeconfig,
        "wait",
        "--for=create",
        "configmap/openblox-profile-admission",
        "-n",
        OPERATOR_NAMESPACE,
        "--timeout=120s",
        timeout=130,
    )


def install_overlay_dir(kubeconfig: str) -> Path:
    """Where the install overlay for the cluster at `kubeconfig` is written."""
    if kubeconfig == str(EMBEDDED_KUBECONFIG):
        return EMBEDDED_KUBECONFIG.parent / "install"
    if Path(kubeconfig).parent == KIND_STATE:
        return KIND_STATE / "install"
    return STATE_ROOT / "install"


def install_registry(kubeconfig: str) -> str:
    """Where the cluster's nodes pull openblox's images from: OPENBLOX_REGISTRY when set;
    on the project's kind cluster, the local registry kind.sh started; else openblox.local
    (the embedded node's own registry)."""
    named = os.environ.get("OPENBLOX_REGISTRY")
    if named:
        return named
    kind_registry = KIND_STATE / "registry-repository"
    if Path(kubeconfig).parent == KIND_STATE and kind_registry.exists():
        return kind_registry.read_text().strip()
    return install_images.SOURCE_REGISTRY


def write_install_overlay(kubeconfig: str) -> Path:
    """The overlay naming this tree's builds by digest, in the cluster's registry."""
    registry = install_registry(kubeconfig)
    images = install_images.built_images(install_images.DEFAULT_CACHE, registry)
    manifests = REPO / "manifests"
    directory = install_overlay_dir(kubeconfig)
    files = install_images.overlay(
        images,
        os.path.relpath(manifests, directory),
        (manifests / install_images.PROFILES_FILE).read_text(),
    )
    return install_images.write_overlay(directory, files)


def ensure_preview_keys(kubeconfig: str) -> None:
    """The preview proxy's key Secret: made once with a random key, never overwritten."""
    found = kubectl(
        kubeconfig, "get", "secret", PREVIEW_KEYS_SECRET, "-n", OPERATOR_NAMESPACE, check=False
    )
    if found.returncode == 0:
        return
    key_id = "k1"
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": PREVIEW_KEYS_SECRET, "namespace": OPERATOR_NAMESPACE},
        "type": "Opaque",
        "stringData": {"current": key_id, key_id: secrets.token_urlsafe(48)},
    }
    # Through stdin, so the key is never on a command line; create, so a racing
    # installer's key is kept rather than replaced.
    made = kubectl(kubeconfig, "create", "-f", "-", stdin=json.dumps(secret), check=False)
    if made.returncode != 0 and "AlreadyExists" not in made.stderr:
        raise RuntimeError(f"could not create the preview key Secret: {made.stderr.strip()}")


def wait_for_prepared_nodes(kubeconfig: str, timeout: float = 90) -> None:
    """Until every node marked for gVisor is labelled ready by its agent (ADR 0020); the
    agents' own words on the Nodes if one is not."""
    deadline = time.monotonic() + timeout
    while True:
        nodes = json.loads(
            kubectl(
                kubeconfig, "get", "nodes", "-l", f"{LABEL_GVISOR_NODE}=true", "-o", "json"
            ).stdout
        )["items"]
        waiting = {
            node["metadata"]["name"]: next(
                (
                    f"{c.get('reason')}: {c.get('message')}"
                    for c in node["status"].get("conditions") or []
                    if c.get("type") == CONDITION_NODE_AGENT
                ),
                "its node agent has not reported",
            )
            for node in nodes
            if node["metadata"].get("labels", {}).get(LABEL_GVISOR_READY) != "true"
        }
        if not waiting:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(
                "nodes not prepared for sandboxes after "
                f"{timeout:.0f} s: " + "; ".join(f"{n}: {why}" for n, why in waiting.items())
            )
        time.sleep(1)


def ensure_demo_namespace(kubeconfig: str) -> str:
    kubectl(
        kubeconfig,
        "apply",
        "-f",
        "-",
        stdin=json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {
                    "name": DEMO_NAMESPACE,
                    "labels": {"openblox.sh/sandboxes": "enabled"},
                },
            }
        ),
    )
    return DEMO_NAMESPACE


def demo(kubeconfig: str) -> int:
    env = {**os.environ, "KUBECONFIG": kubeconfig}
    namespace = ensure_demo_namespace(kubeconfig)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "openblox.cli",
            "-n",
            namespace,
            "run",
            "--profile",
            "code-exec",
            "--",
            "python3",
            "-c",
            "print(6*7)",
        ],
        env=env,
        check=False,
    ).returncode


def main() -> None:
    command = sys.argv[1] if len(sys.argv) > 1 else "up"
    kubeconfig = ensure_cluster()
    if command == "cluster":
        print(f"export KUBECONFIG={kubeconfig}")
        return
    if command != "up":
        raise SystemExit("usage: embedded.py up|cluster")
    install_operator(kubeconfig)
    status = demo(kubeconfig)
    print(f"\nexport KUBECONFIG={kubeconfig} PATH={NODE_BIN}:$PATH", file=sys.stderr)
    raise SystemExit(status)


if __name__ == "__main__":
    main()
