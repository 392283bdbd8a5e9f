"""Helpers for tests that drive Sandboxes with kubectl, as a user or GitOps tool would."""

from __future__ import annotations

import base64
import json
import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

import install_images
from tests.cluster.kubectl import Kube

OPERATOR_SA = "system:serviceaccount:openblox-system:openblox-operator"
PROFILES = ("configmap", "openblox-profiles", "openblox-system")


def sandbox(name: str, namespace: str, profile: str = "code-exec", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "openblox.sh/v1alpha1",
        "kind": "Sandbox",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"profile": profile, **spec},
    }


def opt_in(kube: Kube, namespace: str) -> None:
    kube.kubectl("label", "namespace", namespace, "openblox.sh/sandboxes=enabled", "--overwrite")


@contextmanager
def opted_in_namespace(kube: Kube, prefix: str) -> Iterator[str]:
    """A fresh namespace that may hold sandboxes, deleted (without waiting) afterwards."""
    name = f"{prefix}-{secrets.token_hex(3)}"
    kube.kubectl("create", "namespace", name)
    opt_in(kube, name)
    try:
        yield name
    finally:
        kube.kubectl("delete", "namespace", name, "--wait=false", check=False)


def tenant_identity(kube: Kube, namespace: str, name: str = "tenant") -> str:
    """A ServiceAccount bound only to the shipped `openblox-client` role in `namespace`:
    the identity a tenant has. Returns the user name to impersonate (`kubectl --as`)."""
    kube.kubectl("create", "serviceaccount", name, "-n", namespace)
    kube.kubectl(
        "create", "rolebinding", name, "--clusterrole=openblox-client",
        f"--serviceaccount={namespace}:{name}", "-n", namespace,
    )  # fmt: skip
    return f"system:serviceaccount:{namespace}:{name}"


def ready_condition(body: dict[str, Any]) -> dict[str, Any]:
    for condition in (body.get("status") or {}).get("conditions") or []:
        if condition["type"] == "Ready":
            return dict(condition)
    return {}


def wait_for(what: str, probe: Callable[[], Any], timeout: float = 120, every: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last seen: {last!r}")


def get_sandbox(kube: Kube, name: str, namespace: str) -> dict[str, Any] | None:
    # Fully qualified: another project's Sandbox kind (agent-sandbox's) shares the plural.
    result = kube.kubectl(
        "get", "sandboxes.openblox.sh", name, "-n", namespace, "-o", "json", check=False
    )
    return json.loads(result.stdout) if result.returncode == 0 else None


def pod_of(kube: Kube, name: str, namespace: str) -> str:
    """The Sandbox's pod as the operator reports it: a warm pod keeps its pool's name."""
    body = get_sandbox(kube, name, namespace) or {}
    pod = (body.get("status") or {}).get("podName")
    assert pod, f"Sandbox {namespace}/{name} reports no pod: {body.get('status')}"
    return str(pod)


def wait_reason(
    kube: Kube, name: str, namespace: str, reason: str, timeout: float = 120
) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        body = get_sandbox(kube, name, namespace)
        return body if body and ready_condition(body).get("reason") == reason else None

    try:
        result: dict[str, Any] = wait_for(
            f"sandbox {namespace}/{name} reason {reason}", probe, timeout
        )
    except AssertionError as error:
        raise AssertionError(f"{error}; {_what_it_says(kube, name, namespace)}") from None
    return result


def _what_it_says(kube: Kube, name: str, namespace: str) -> str:
    """The Sandbox's Ready condition and its pods' placement and state, for a failure."""
    body = get_sandbox(kube, name, namespace)
    if body is None:
        return "the Sandbox is gone"
    condition = ready_condition(body)
    pods = [
        {
            "name": p["metadata"]["name"],
            "node": p["spec"].get("nodeName"),
            "phase": (p.get("status") or {}).get("phase"),
            "conditions": [
                (c.get("type"), c.get("status"), c.get("reason"), c.get("message"))
                for c in (p.get("status") or {}).get("conditions") or []
            ],
        }
        for p in sandbox_pods(kube, namespace)
        if p["metadata"].get("labels", {}).get("openblox.sh/sandbox") == name
    ]
    return f"it says {condition.get('reason')!r}: {condition.get('message')!r}; its pods: {pods}"


def sandbox_pods(kube: Kube, namespace: str) -> list[dict[str, Any]]:
    out = kube.kubectl("get", "pods", "-n", namespace, "-l", "openblox.sh/sandbox", "-o", "json")
    items: list[dict[str, Any]] = json.loads(out.stdout)["items"]
    return items


@contextmanager
def extra_profiles(kube: Kube, profiles: dict[str, str]) -> Iterator[None]:
    """Add profile keys to the admins' ConfigMap for the duration, then remove them."""
    patch = {"data": profiles}
    kube.kubectl("patch", *PROFILES[:2], "-n", PROFILES[2], "--type=merge", "-p", json.dumps(patch))
    try:
        yield
    finally:
        removal = {"data": dict.fromkeys(profiles)}
        kube.kubectl(
            "patch", *PROFILES[:2], "-n", PROFILES[2], "--type=merge", "-p", json.dumps(removal)
        )


def installed_sandbox_image() -> str:
    """The sandbox image the install pinned in the shipped profiles: this tree's build."""
    return install_images.pinned(
        install_images.SANDBOX_IMAGE,
        install_images.built_digest(install_images.SANDBOX_IMAGE, install_images.DEFAULT_CACHE),
    ).reference


def profile_yaml(**fields: Any) -> str:
    document = {"image": installed_sandbox_image(), **fields}
    return yaml.safe_dump(document)


def admission_has(kube: Kube, *names: str) -> bool:
    out = kube.kubectl(
        "get",
        "configmap",
        "openblox-profile-admission",
        "-n",
        "openblox-system",
        "-o",
        "json",
        check=False,
    )
    if out.returncode != 0:
        return False
    data = json.loads(out.stdout).get("data") or {}
    return all(name in data for name in names)


def client_role_kubeconfig(
    kube: Kube, namespace: str, directory: Path, duration: str = "10m"
) -> str:
    """A kubeconfig with a bearer token of a ServiceAccount (`app`) holding only the
    openblox-client role in `namespace`: a tenant, as the threat model has one."""
    kube.kubectl("create", "serviceaccount", "app", "-n", namespace)
    kube.kubectl(
        "create",
        "rolebinding",
        "app",
        "--clusterrole=openblox-client",
        f"--serviceaccount={namespace}:app",
        "-n",
        namespace,
    )
    token = kube.kubectl("create", "token", "app", "-n", namespace, f"--duration={duration}").stdout
    admin = yaml.safe_load(Path(kube.kubeconfig).read_text())
    cluster = admin["clusters"][0]["cluster"]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "app", "user": {"token": token.strip()}}],
        "contexts": [
            {"name": "app", "context": {"cluster": "c", "user": "app", "namespace": namespace}}
        ],
        "current-context": "app",
    }
    path = directory / "token.kubeconfig"
    path.write_text(json.dumps(config))
    assert base64.b64decode(cluster["certificate-authority-data"])  # the CA is checked
    return str(path)
