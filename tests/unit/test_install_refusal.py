"""`make up` refuses a cluster openblox does not support before it applies anything
(cluster/embedded.py), with kubectl replaced by a fake that answers as such a cluster would."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "cluster"))

import embedded
from openblox.models.cluster_support import ADMISSION_DISCOVERY_PATH, VERSION_PATH
from openblox.names import LABEL_GVISOR_NODE

KUBECONFIG = "/tmp/foreign.kubeconfig"
SERVER = "https://192.0.2.10:6443"
SERVED = {
    "resources": [
        {"name": "validatingadmissionpolicies"},
        {"name": "validatingadmissionpolicybindings"},
    ]
}


def gvisor_node(name: str, runtime: str, handlers: list[str] | None) -> dict[str, Any]:
    status: dict[str, Any] = {"nodeInfo": {"containerRuntimeVersion": runtime}}
    if handlers is not None:
        status["runtimeHandlers"] = [{"name": h} for h in handlers]
    return {"metadata": {"name": name, "labels": {LABEL_GVISOR_NODE: "true"}}, "status": status}


GOOD_NODE = gvisor_node("n1", "containerd://2.4.2", ["", "runc", "runsc"])


class FakeKubectl:
    """Answers `get --raw` from `raw` (None: 404), `config view` with SERVER; records
    every call, and fails the test if anything tries to change the cluster."""

    def __init__(self, raw: dict[str, Any]) -> None:
        self.raw = raw
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, kubeconfig: str, *args: str, **_: Any) -> subprocess.CompletedProcess[str]:
        assert kubeconfig == KUBECONFIG
        self.calls.append(args)
        if args[:2] == ("get", "--raw"):
            body = self.raw[args[2]]
            if body is None:
                stderr = (
                    "Error from server (NotFound): the server could not find the requested resource"
                )
                return subprocess.CompletedProcess(args, 1, "", stderr)
            text = body if isinstance(body, str) else json.dumps(body)
            return subprocess.CompletedProcess(args, 0, text, "")
        if args[:2] == ("config", "view"):
            return subprocess.CompletedProcess(args, 0, SERVER, "")
        raise AssertionError(f"the install went on to kubectl {' '.join(args)}")


def cluster(
    git_version: str = "v1.37.2", admission: object = SERVED, node_list: object = None
) -> FakeKubectl:
    return FakeKubectl(
        {
            VERSION_PATH: {"major": "1", "minor": "29+", "gitVersion": git_version},
            ADMISSION_DISCOVERY_PATH: admission,
            embedded.NODES_PATH: node_list if node_list is not None else {"items": [GOOD_NODE]},
        }
    )


Install = Callable[[FakeKubectl], str]


@pytest.fixture
def install(monkeypatch: pytest.MonkeyPatch) -> Install:
    def run(fake: FakeKubectl) -> str:
        monkeypatch.setattr(embedded, "kubectl", fake)
        with pytest.raises(SystemExit) as refused:
            embedded.install_operator(KUBECONFIG)
        return str(refused.value.code)

    return run


def test_an_older_api_server_is_refused_naming_the_minimum(install: Install) -> None:
    fake = cluster(git_version="v1.29.4")
    assert install(fake) == (
        "openblox needs Kubernetes 1.30 or newer (ValidatingAdmissionPolicy "
        "admissionregistration.k8s.io/v1, exec over WebSocket v5); the API server at "
        f"{SERVER} is v1.29.4; nothing was installed"
    )
    assert not any(
        call[:2] == ("get", "--raw") and call[2] == embedded.NODES_PATH for call in fake.calls
    )


def test_a_server_hiding_the_admission_policies_is_refused(install: Install) -> None:
    hidden = {"resources": [{"name": "validatingwebhookconfigurations"}]}
    message = install(cluster(admission=hidden))
    assert (
        "does not serve validatingadmissionpolicies, validatingadmissionpolicybindings" in message
    )
    assert message.endswith("; nothing was installed")


def test_a_server_without_the_group_version_is_refused(install: Install) -> None:
    assert "does not serve admissionregistration.k8s.io/v1 at all" in install(
        cluster(admission=None)
    )


def test_a_gvisor_node_on_containerd_1_is_refused(install: Install) -> None:
    old = gvisor_node("edge-3", "containerd://1.7.27-k3s1", None)
    message = install(cluster(node_list={"items": [GOOD_NODE, old]}))
    assert message.startswith(
        "node edge-3 runs containerd 1.7.27-k3s1; openblox needs containerd 2.0"
    )


def test_a_gvisor_node_without_runsc_is_refused(install: Install) -> None:
    bare = gvisor_node("w9", "containerd://2.1.0", ["", "runc"])
    assert (
        "node w9 is labelled openblox.sh/gvisor=true, but its containerd has no runsc"
        in install(cluster(node_list={"items": [bare]}))
    )


def test_a_discovery_failure_other_than_404_stops_the_install_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def forbidden(kubeconfig: str, *args: str, **_: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(args, 1, "", "Error from server (Forbidden): no")

    monkeypatch.setattr(embedded, "kubectl", forbidden)
    with pytest.raises(SystemExit) as refused:
        embedded.install_operator(KUBECONFIG)
    assert str(refused.value.code).startswith("could not read /version from the cluster of ")
    assert str(refused.value.code).endswith("(Forbidden): no; nothing was installed")


def test_what_cannot_be_checked_is_printed_and_the_install_goes_on(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    old_kubelet = gvisor_node("n2", "containerd://2.0.0", None)
    fake = cluster(git_version="v1.30.14-eks-1a2b3c", node_list={"items": [old_kubelet]})
    monkeypatch.setattr(embedded, "kubectl", fake)
    # The overlay names this machine's builds, which a fresh clone has not made before
    # its unit tests run; where it is written is no concern of the checks under test.
    monkeypatch.setattr(embedded, "write_install_overlay", lambda kubeconfig: tmp_path)
    # The checks pass with a warning; the fake then refuses the first change (the apply).
    with pytest.raises(AssertionError, match="went on to kubectl apply"):
        embedded.install_operator(KUBECONFIG)
    err = capsys.readouterr().err
    assert err.startswith("warning: node n2 reports no runtime handlers")


def test_a_body_that_is_not_json_is_judged_not_trusted(install: Install) -> None:
    fake = cluster(git_version="v1.29.0")
    fake.raw[VERSION_PATH] = "<html>proxy error</html>"
    fake.raw[ADMISSION_DISCOVERY_PATH] = "<html>proxy error</html>"
    message = install(fake)
    assert "does not serve validatingadmissionpolicies" in message
