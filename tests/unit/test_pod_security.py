"""Sandbox pods must pass Pod Security Admission "restricted" for any valid profile.

The checks follow https://kubernetes.io/docs/concepts/security/pod-security-standards/
(baseline plus restricted, latest version). The cluster enforces the real thing; this
catches a regression before a pod is ever sent.
"""

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from openblox.builders import build_pod
from openblox.models import parse_profile
from tests.unit.factories import CREATED, IMAGE_LINE, default_profile, make_sandbox

RESTRICTED_VOLUME_TYPES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
    "persistentVolumeClaim", "projected", "secret",
}  # fmt: skip
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}  # fmt: skip


def restricted_violations(pod: dict[str, Any]) -> Iterator[str]:
    spec = pod["spec"]
    pod_security = spec.get("securityContext", {})
    containers = [
        *spec.get("initContainers", []),
        *spec.get("containers", []),
        *spec.get("ephemeralContainers", []),
    ]
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            yield f"spec.{field}"
    for volume in spec.get("volumes", []):
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUME_TYPES:
            yield f"volume {volume['name']} of type {kinds}"
    if any(sysctl["name"] not in SAFE_SYSCTLS for sysctl in pod_security.get("sysctls", [])):
        yield "unsafe sysctl"
    if pod_security.get("runAsUser") == 0:
        yield "pod runAsUser 0"
    for section in [pod_security, *(c.get("securityContext", {}) for c in containers)]:
        if section.get("windowsOptions", {}).get("hostProcess"):
            yield "hostProcess"
        if section.get("seLinuxOptions", {}).keys() & {"user", "role"}:
            yield "seLinuxOptions user or role"
        if section.get("appArmorProfile", {}).get("type") == "Unconfined":
            yield "appArmor unconfined"
        if section.get("seccompProfile", {}).get("type") not in (
            None,
            "RuntimeDefault",
            "Localhost",
        ):
            yield "seccomp not RuntimeDefault or Localhost"
    for c in containers:
        security = c.get("securityContext", {})
        name = c["name"]
        if security.get("privileged"):
            yield f"{name}: privileged"
        if security.get("allowPrivilegeEscalation") is not False:
            yield f"{name}: allowPrivilegeEscalation is not false"
        if security.get("procMount", "Default") != "Default":
            yield f"{name}: procMount"
        if security.get("runAsUser") == 0:
            yield f"{name}: runAsUser 0"
        if not security.get("runAsNonRoot", pod_security.get("runAsNonRoot")):
            yield f"{name}: runAsNonRoot is not true"
        if security.get("seccompProfile", pod_security.get("seccompProfile")) is None:
            yield f"{name}: no seccompProfile"
        capabilities = security.get("capabilities", {})
        if "ALL" not in capabilities.get("drop", []):
            yield f"{name}: capabilities not dropping ALL"
        if set(capabilities.get("add", [])) - {"NET_BIND_SERVICE"}:
            yield f"{name}: capabilities added"
        if any(port.get("hostPort") for port in c.get("ports", [])):
            yield f"{name}: hostPort"


PROFILES = {
    "default": IMAGE_LINE,
    "kata": IMAGE_LINE + "runtimeClassName: kata\n",
    "unsafe runc": IMAGE_LINE + "runtimeClassName: runc\nunsafe: true\n",
    "big": IMAGE_LINE + "user: 65534\ngroup: 65534\nresources: {memory: 8Gi, scratch: 2Gi}\n",
}


@pytest.mark.parametrize("raw_yaml", PROFILES.values(), ids=PROFILES.keys())
def test_sandbox_pods_pass_pod_security_restricted(raw_yaml: str) -> None:
    pod = build_pod(make_sandbox(), parse_profile("p", raw_yaml), now=CREATED)
    assert list(restricted_violations(pod)) == []


@pytest.mark.parametrize(
    ("path", "value", "violation"),
    [
        (("spec", "hostPID"), True, "spec.hostPID"),
        (("spec", "securityContext", "runAsUser"), 0, "pod runAsUser 0"),
        (("spec", "volumes"), [{"name": "h", "hostPath": {"path": "/"}}], "volume h"),
        (("spec", "containers", 0, "securityContext", "capabilities"), {}, "not dropping ALL"),
        (("spec", "containers", 0, "securityContext", "allowPrivilegeEscalation"), True, "allowP"),
        (("spec", "securityContext", "seccompProfile"), {"type": "Unconfined"}, "seccomp"),
    ],
)
def test_the_checker_catches_violations(path: tuple[Any, ...], value: Any, violation: str) -> None:
    pod = copy.deepcopy(build_pod(make_sandbox(), default_profile(), now=CREATED))
    parent = pod
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value

    assert any(violation in found for found in restricted_violations(pod))
