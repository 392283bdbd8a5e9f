"""The one pod a Sandbox runs in: a pure function of the Sandbox, its profile and the
moment it is built (which only sets how long the pod may run: until the Sandbox's max age).

Everything here must pass Pod Security Admission "restricted"; the isolation the profile
claims comes from its RuntimeClass, and this spec takes away everything else.
"""

import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, TypeVar

from openblox.lifetime import effective_lifetime, remaining_max_age_seconds
from openblox.models import STATE_VOLUME_SIZE, Profile, Sandbox
from openblox.models.pool import Pool
from openblox.names import (
    ANNOTATION_BOUNDARY,
    ANNOTATION_NRI_REQUIRED_PLUGINS,
    ANNOTATION_PROCESSES,
    ANNOTATION_PROFILE_DIGEST,
    ANNOTATION_RUNSC_OCI_SECCOMP,
    API_VERSION,
    CONTAINER_NAME,
    KIND,
    LABEL_MANAGED_BY,
    LABEL_POOL,
    LABEL_PROFILE,
    LABEL_SANDBOX,
    LABEL_UNVERIFIED,
    MANAGED_BY,
    NRI_PLUGIN_NAME,
    SECCOMP_LOCALHOST_PROFILE,
    STATE_DIR,
    TMP_DIR,
    WORKSPACE_DIR,
)
from openblox.timestamps import parse_timestamp

PodT = TypeVar("PodT", bound=Mapping[str, Any])


def pod_name(sandbox: Sandbox) -> str:
    """Deterministic, so a retried create finds the existing pod instead of making another."""
    return sandbox.name


def pod_labels(sandbox: Sandbox, profile: Profile) -> dict[str, str]:
    return {
        LABEL_SANDBOX: sandbox.name,
        LABEL_PROFILE: profile.name,
        LABEL_MANAGED_BY: MANAGED_BY,
        # Sealed until the boundary probe's verdict (`unsealed_boundary_patch`).
        LABEL_UNVERIFIED: "",
    }


def unsealed_boundary_patch(pod: Mapping[str, Any], boundary: str) -> dict[str, Any]:
    """The merge patch that records the boundary the probe found in the pod and, in the
    same write, unseals it for callers. The uid is a precondition: a pod made since
    under the same name (a cold pod's name is its Sandbox's) was not probed."""
    return {
        "metadata": {
            "uid": pod["metadata"]["uid"],
            "annotations": {ANNOTATION_BOUNDARY: boundary},
            "labels": {LABEL_UNVERIFIED: None},
        }
    }


def owner_reference(sandbox: Sandbox) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": sandbox.name,
        "uid": sandbox.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def is_owned_by(pod: Mapping[str, Any], sandbox: Sandbox) -> bool:
    """Whether a pod found under the sandbox's pod name is this Sandbox's (not a namesake's)."""
    references = pod.get("metadata", {}).get("ownerReferences") or []
    return any(
        reference.get("controller") is True and reference.get("uid") == sandbox.uid
        for reference in references
    )


def rank_owned_pods(pods: Iterable[PodT], named: str | None) -> list[PodT]:
    """The pods a Sandbox controls, the one it keeps first.

    A live pod goes before one being deleted, whatever the status says: a status read
    before its pod was deleted must not make the reconcile delete the other pod too (a
    hand-out sent by a replaced operator can land after the new one made a cold pod, and
    both would be lost). Then the pod the status names (what clients were told), then
    the oldest.
    """
    return sorted(
        pods,
        key=lambda p: (
            bool(p["metadata"].get("deletionTimestamp")),
            p["metadata"]["name"] != named,
            str(p["metadata"].get("creationTimestamp") or ""),
            p["metadata"]["name"],
        ),
    )


def is_left_by_namesake(pod: Mapping[str, Any], sandbox: Sandbox) -> bool:
    """Whether the pod belonged to an earlier Sandbox of the same name, now deleted.

    Names are unique at any moment, so a controlling Sandbox of this name with another
    uid is gone: its pod only waits for the garbage collector.
    """
    references = pod.get("metadata", {}).get("ownerReferences") or []
    return any(
        reference.get("controller") is True
        and reference.get("apiVersion") == API_VERSION
        and reference.get("kind") == KIND
        and reference.get("name") == sandbox.name
        and reference.get("uid") != sandbox.uid
        for reference in references
    )


# openblox's own filter (node-agent/sandbox-seccomp.json, which the node agent installs),
# not RuntimeDefault: it is the one that holds for every process in the pod, however
# started (docs/adr/0007).
def _seccomp_profile() -> dict[str, str]:
    return {"type": "Localhost", "localhostProfile": SECCOMP_LOCALHOST_PROFILE}


def pod_annotations(profile: Profile) -> dict[str, str]:
    """What the node reads from the pod: the process cap, runsc's switch to enforce the
    pod's seccomp profile inside the sandbox, and the NRI plugin the sandbox container
    may not be created without. Only the operator writes sandbox pods."""
    return {
        ANNOTATION_PROFILE_DIGEST: profile.digest,
        ANNOTATION_PROCESSES: str(profile.resources.processes),
        ANNOTATION_RUNSC_OCI_SECCOMP: "true",
        ANNOTATION_NRI_REQUIRED_PLUGINS: json.dumps([NRI_PLUGIN_NAME]),
    }


KUBELET_SERVICE_VARIABLES = (
    "KUBERNETES_SERVICE_HOST",
    "KUBERNETES_SERVICE_PORT",
    "KUBERNETES_SERVICE_PORT_HTTPS",
    "KUBERNETES_PORT",
    "KUBERNETES_PORT_443_TCP",
    "KUBERNETES_PORT_443_TCP_PROTO",
    "KUBERNETES_PORT_443_TCP_PORT",
    "KUBERNETES_PORT_443_TCP_ADDR",
)


# How long a sandbox pod stays bound to a node that stopped answering (after the node
# lifecycle controller marks it, about 40 s): short, because a sandbox on a lost node is
# gone for its caller anyway.
NODE_LOSS_TOLERATION_SECONDS = 10


def build_pod(
    sandbox: Sandbox,
    profile: Profile,
    *,
    now: datetime,
    avoid_nodes: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """The complete Pod manifest for a pod made at `now`; raises LifetimeTooLong if the
    Sandbox outlives its profile. `avoid_nodes` are nodes lately found not prepared for
    sandboxes: the scheduler prefers any other."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(sandbox),
            "namespace": sandbox.namespace,
            "labels": pod_labels(sandbox, profile),
            "annotations": pod_annotations(profile),
            "ownerReferences": [owner_reference(sandbox)],
        },
        "spec": _pod_spec(
            profile,
            hostname=sandbox.name,
            # A backstop for max age that holds even while the operator is down. The
            # kubelet counts it from the pod's start, so a pod that replaces one late in
            # the Sandbox's life gets only what is left of it, not a whole max age.
            active_deadline_seconds=remaining_max_age_seconds(
                sandbox, effective_lifetime(sandbox, profile), now
            ),
            avoid_nodes=avoid_nodes,
        ),
    }


def pool_pod_name(pool: Pool, suffix: str) -> str:
    """`<pool>.<suffix>`: the dot keeps it from ever being a Sandbox's name (those are DNS
    labels), so a cold create never meets a pool pod. The caller picks the suffix (the
    API server refuses a generateName that ends in a dot)."""
    return f"{pool.name}.{suffix}"


def build_pool_pod(
    pool: Pool,
    namespace: str,
    profile: Profile,
    suffix: str,
    avoid_nodes: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """A warm pod: the same spec a cold one gets from this profile, waiting for a Sandbox.

    It carries the sandbox label with an empty value, so the pod admission policy and
    the default-deny NetworkPolicy hold for it from the start, and no owner and no
    deadline: its lifetime starts when a Sandbox gets it (`claim_patch`).
    """
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pool_pod_name(pool, suffix),
            "namespace": namespace,
            "labels": {
                LABEL_SANDBOX: "",
                LABEL_POOL: pool.name,
                LABEL_PROFILE: profile.name,
                LABEL_MANAGED_BY: MANAGED_BY,
            },
            "annotations": pod_annotations(profile),
        },
        "spec": _pod_spec(
            profile, hostname=pool.name, active_deadline_seconds=None, avoid_nodes=avoid_nodes
        ),
    }


def claim_patch(
    pod: Mapping[str, Any], sandbox: Sandbox, profile: Profile, now: datetime
) -> dict[str, Any]:
    """The merge patch that hands a warm pod to one Sandbox, atomically.

    It carries the pod's resourceVersion, so of two hand-outs of the same pod the API
    server applies one and refuses the other with 409. The pod's deadline, which the
    kubelet counts from the pod's start, becomes the time from that start to the
    Sandbox's max age, so the pod ends with its Sandbox however long it was warm.
    """
    metadata = pod["metadata"]
    started_text = (pod.get("status") or {}).get("startTime") or metadata["creationTimestamp"]
    started = min(parse_timestamp(started_text), now)
    return {
        "metadata": {
            "resourceVersion": metadata["resourceVersion"],
            "labels": {LABEL_SANDBOX: sandbox.name, LABEL_POOL: None},
            "ownerReferences": [owner_reference(sandbox)],
        },
        "spec": {
            "activeDeadlineSeconds": remaining_max_age_seconds(
                sandbox, effective_lifetime(sandbox, profile), started
            )
        },
    }


def _pod_spec(
    profile: Profile,
    *,
    hostname: str,
    active_deadline_seconds: int | None,
    avoid_nodes: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    resources = profile.resources
    limits = {
        "cpu": resources.cpu.text,
        "memory": resources.memory.text,
        "ephemeral-storage": resources.ephemeral_storage.text,
    }
    # Only CPU may be requested below its limit (Burstable): CPU is throttled, never
    # taken back by killing, while memory above a request is what eviction reclaims.
    requests = {**limits, "cpu": resources.effective_cpu_request.text}
    spec: dict[str, Any] = {
        "runtimeClassName": profile.runtime_class_name,
        "restartPolicy": "Never",
    }
    if active_deadline_seconds is not None:
        spec["activeDeadlineSeconds"] = active_deadline_seconds
    if avoid_nodes:
        # Preferred, not required: where no other node can take it, the pod goes back to
        # one of them (and is refused there again, after a hold) instead of staying
        # Unschedulable once the node is fixed.
        spec["affinity"] = {
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "preference": {
                            # matchFields takes one value with NotIn; the hostname
                            # label takes a list.
                            "matchExpressions": [
                                {
                                    "key": "kubernetes.io/hostname",
                                    "operator": "NotIn",
                                    "values": sorted(avoid_nodes),
                                }
                            ]
                        },
                    }
                ]
            }
        }
    spec.update(
        {
            "terminationGracePeriodSeconds": 1,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "hostNetwork": False,
            "hostPID": False,
            "hostIPC": False,
            "hostname": hostname,
            # A lost node: the pod is evicted after this, not Kubernetes' default 300 s,
            # so the Sandbox reports the loss and gets a pod on another node in time.
            "tolerations": [
                {
                    "key": taint,
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": NODE_LOSS_TOLERATION_SECONDS,
                }
                for taint in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
            ],
            "dnsPolicy": "None",
            # The API server requires a nameserver with dnsPolicy None. Loopback is the
            # pod's own network namespace and nothing listens there, so lookups fail at
            # once and no query leaves the pod: a resolver would be a way out.
            "dnsConfig": {
                "nameservers": ["127.0.0.1"],
                "options": [{"name": "ndots", "value": "1"}],
            },
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": profile.user,
                "runAsGroup": profile.group,
                "supplementalGroups": [],
                "seccompProfile": _seccomp_profile(),
            },
            "containers": [_container(profile, limits, requests)],
            # Memory-backed, so scratch space is charged to the memory limit, not node disk.
            "volumes": [
                _memory_volume("tmp", resources.scratch.text),
                _memory_volume("workspace", resources.scratch.text),
                _memory_volume("state", STATE_VOLUME_SIZE.text),
            ],
        }
    )
    return spec


def _container(
    profile: Profile, limits: Mapping[str, str], requests: Mapping[str, str]
) -> dict[str, Any]:
    return {
        "name": CONTAINER_NAME,
        "image": profile.image,
        # The profile pins the image by digest, so a node that holds it already holds the
        # very content the admin named (docs/adr/0021).
        "imagePullPolicy": "IfNotPresent",
        "command": list(profile.command),
        "workingDir": WORKSPACE_DIR,
        "env": [
            {"name": "HOME", "value": WORKSPACE_DIR},
            {"name": "TMPDIR", "value": TMP_DIR},
            # The kubelet adds the API server's address to every container,
            # enableServiceLinks or not; an explicit empty value wins.
            *({"name": name, "value": ""} for name in KUBELET_SERVICE_VARIABLES),
        ],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "privileged": False,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": _seccomp_profile(),
        },
        # The limits are the caps the sandbox cannot exceed, whatever it requests.
        "resources": {"requests": dict(requests), "limits": dict(limits)},
        "volumeMounts": [
            {"name": "tmp", "mountPath": TMP_DIR},
            {"name": "workspace", "mountPath": WORKSPACE_DIR},
            {"name": "state", "mountPath": STATE_DIR},
        ],
    }


def _memory_volume(name: str, size: str) -> dict[str, Any]:
    return {"name": name, "emptyDir": {"medium": "Memory", "sizeLimit": size}}
