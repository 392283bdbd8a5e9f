"""agent-sandbox's objects for the pool section's baseline (kubernetes-sigs/agent-sandbox
v1.0.1: SandboxTemplate, SandboxWarmPool, SandboxClaim), built from openblox's own pool
pod so both systems run the same pod; and what a claim's status says. Pure: no cluster.

What cannot be the same, and is dropped from openblox's pod: openblox's labels (its
admission policy lets only its operator write pods that carry them) and the annotations
only openblox's NRI plugin reads (the process cap, the required-plugin gate, the profile
digest). So agent-sandbox's pods get none of the plugin's hardening (noexec scratch, a
bounded /dev/shm, the process cap); everything the pod spec itself says is kept.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from openblox.names import ANNOTATION_RUNSC_OCI_SECCOMP

CORE_GROUP = "agents.x-k8s.io"
EXTENSIONS_GROUP = "extensions.agents.x-k8s.io"
VERSION = "v1beta1"
# The plural `sandboxes` is openblox's too: kubectl must be told the group.
SANDBOXES = f"sandboxes.{CORE_GROUP}"
KINDS = ("sandboxclaims", "sandboxwarmpools", "sandboxtemplates")
CRDS = (
    f"sandboxclaims.{EXTENSIONS_GROUP}",
    f"sandboxwarmpools.{EXTENSIONS_GROUP}",
    f"sandboxtemplates.{EXTENSIONS_GROUP}",
    SANDBOXES,
)
# Annotations of openblox's pod that the runtime itself reads (runsc's flags) and so
# mean the same under agent-sandbox; every other openblox annotation is for its plugin.
RUNTIME_ANNOTATIONS = (ANNOTATION_RUNSC_OCI_SECCOMP,)
# Fields of openblox's pool pod spec that are about openblox's pool, not the sandbox.
POOL_ONLY_SPEC_FIELDS = ("hostname", "activeDeadlineSeconds", "affinity")


def extensions_path(namespace: str, plural: str, name: str | None = None) -> str:
    base = f"/apis/{EXTENSIONS_GROUP}/{VERSION}/namespaces/{namespace}/{plural}"
    return base if name is None else f"{base}/{name}"


def pod_template(pool_pod: Mapping[str, Any]) -> dict[str, Any]:
    """The podTemplate of a SandboxTemplate, from one of openblox's pool pods (as
    `build_pool_pod` makes it): the same spec, less what only openblox reads."""
    annotations = pool_pod.get("metadata", {}).get("annotations") or {}
    spec = copy.deepcopy(dict(pool_pod["spec"]))
    for field in POOL_ONLY_SPEC_FIELDS:
        spec.pop(field, None)
    metadata: dict[str, Any] = {
        "annotations": {k: v for k, v in annotations.items() if k in RUNTIME_ANNOTATIONS}
    }
    return {"metadata": metadata, "spec": spec}


def sandbox_template(name: str, namespace: str, template: Mapping[str, Any]) -> dict[str, Any]:
    """A SandboxTemplate whose network policy is the namespace's own default-deny one
    (`deny_all_policy`), not the one agent-sandbox would make (which opens egress to
    public addresses and ingress from its router)."""
    return {
        "apiVersion": f"{EXTENSIONS_GROUP}/{VERSION}",
        "kind": "SandboxTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "podTemplate": copy.deepcopy(dict(template)),
            "networkPolicyManagement": "Unmanaged",
        },
    }


def warm_pool(name: str, namespace: str, template: str, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": f"{EXTENSIONS_GROUP}/{VERSION}",
        "kind": "SandboxWarmPool",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": replicas, "sandboxTemplateRef": {"name": template}},
    }


def claim(name: str, namespace: str, pool: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{EXTENSIONS_GROUP}/{VERSION}",
        "kind": "SandboxClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"warmPoolRef": {"name": pool}},
    }


def deny_all_policy(namespace: str, name: str = "deny-all") -> dict[str, Any]:
    """Every pod of the namespace: no ingress, no egress (the gvisor RuntimeClass gives
    the pod only `lo` anyway, as it does openblox's)."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]},
    }


def _condition(body: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for condition in (body.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return condition  # type: ignore[no-any-return]
    return None


def is_ready(body: Mapping[str, Any]) -> bool:
    """A claim (or pool sandbox) whose Ready condition is True."""
    condition = _condition(body, "Ready")
    return condition is not None and condition.get("status") == "True"


def sandbox_name(body: Mapping[str, Any]) -> str | None:
    """The Sandbox (and so the pod) a claim was given, once it says."""
    name = ((body.get("status") or {}).get("sandbox") or {}).get("name")
    return str(name) if name else None


def is_warm(body: Mapping[str, Any]) -> bool:
    """It adopted a pool's Sandbox: a cold one is named after the claim, a pool's is not."""
    name = sandbox_name(body)
    return name is not None and name != body["metadata"]["name"]


def ready_replicas(pool: Mapping[str, Any]) -> int:
    return int((pool.get("status") or {}).get("readyReplicas") or 0)


# What a pod must carry over from the template for the two systems' pods to be the same
# pod; the API server's own defaults (terminationMessagePath and the like) are not compared.
COMPARED_SPEC_FIELDS = (
    "runtimeClassName",
    "securityContext",
    "automountServiceAccountToken",
    "enableServiceLinks",
    "dnsPolicy",
    "dnsConfig",
    "volumes",
    "terminationGracePeriodSeconds",
)
COMPARED_CONTAINER_FIELDS = (
    "image",
    "imagePullPolicy",
    "command",
    "env",
    "resources",
    "securityContext",
    "volumeMounts",
)


def _meaning(value: Any) -> Any:
    """A value as Kubernetes means it: an empty string, list or map is the same as none
    (a Go client's round trip drops them: `supplementalGroups: []`, `value: ""`)."""
    if isinstance(value, Mapping):
        kept = {k: _meaning(v) for k, v in value.items()}
        return {k: v for k, v in kept.items() if v not in ("", [], {}, None)}
    if isinstance(value, list):
        return [_meaning(v) for v in value]
    return value


def differences(template: Mapping[str, Any], pod: Mapping[str, Any]) -> list[str]:
    """Where a pod agent-sandbox made differs from the template's pod, field by field."""
    wanted, got = _meaning(template["spec"]), _meaning(pod.get("spec") or {})
    found = [f for f in COMPARED_SPEC_FIELDS if wanted.get(f) != got.get(f)]
    pairs = zip(wanted.get("containers") or [], got.get("containers") or [], strict=False)
    for want, have in pairs:
        found.extend(
            f"containers[{want.get('name')}].{f}"
            for f in COMPARED_CONTAINER_FIELDS
            if want.get(f) != have.get(f)
        )
    return found
