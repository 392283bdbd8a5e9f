"""Whether a cluster is one openblox supports, decided from what its API server says.

Pure: the installer (cluster/embedded.py, through kubectl) and the operator (through the
transport) read the bodies; this module only judges them, so both refuse the same
clusters with the same words. Every body is untrusted input: a field may be missing, of
another type, or hold anything, and what is quoted back is bounded and printable.

- the API server: `/version` and the discovery document of admissionregistration.k8s.io/v1;
- the nodes labelled for gVisor: `status.nodeInfo.containerRuntimeVersion` and
  `status.runtimeHandlers` of a `kubectl get nodes -o json` (a NodeList).

An error is a cluster openblox cannot work on as it stands; a warning is what could not
be checked, or what works but is not what openblox is tested on.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from openblox.names import LABEL_GVISOR_NODE, RUNTIME_HANDLER_GVISOR

# The API floor: ValidatingAdmissionPolicy v1 (manifests/admission.yaml, with
# paramRef.selector) and exec over WebSocket v5.channel.k8s.io (the transport's only exec
# protocol, on by default from 1.30) both arrived in Kubernetes 1.30.
MINIMUM_KUBERNETES: Final = (1, 30)
MINIMUM_KUBERNETES_TEXT: Final = f"Kubernetes {MINIMUM_KUBERNETES[0]}.{MINIMUM_KUBERNETES[1]}"
MINIMUM_BECAUSE: Final = (
    "ValidatingAdmissionPolicy admissionregistration.k8s.io/v1, exec over WebSocket v5"
)
# gVisor's shim and openblox's NRI plugin are built and tested against containerd 2.
MINIMUM_CONTAINERD_MAJOR: Final = 2

VERSION_PATH: Final = "/version"
ADMISSION_GROUP_VERSION: Final = "admissionregistration.k8s.io/v1"
ADMISSION_DISCOVERY_PATH: Final = f"/apis/{ADMISSION_GROUP_VERSION}"
ADMISSION_POLICY_RESOURCES: Final = (
    "validatingadmissionpolicies",
    "validatingadmissionpolicybindings",
)

# What is quoted back from a body: enough to recognise it, never a flood.
QUOTED_CHARACTERS: Final = 80
QUOTED_HANDLERS: Final = 8

# `v1.30.4`, `v1.30.4-eks-a1b2c3`, `v1.30.4+k3s1`: the numbers come from gitVersion, never
# from `minor`, which providers write as "30+".
_KUBERNETES_VERSION = re.compile(r"v(\d{1,4})\.(\d{1,4})(?:[.+-]|$)")
# `containerd://2.0.5`, `containerd://v1.7.27`, `containerd://1.7.27-k3s1`.
_RUNTIME_VERSION = re.compile(r"([a-z0-9.-]{1,32})://v?(\d{1,4})\.(\d{1,4})")


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"


class SupportProblem(StrEnum):
    """What a finding is about; tests and callers match on these, not on the words."""

    KUBERNETES_TOO_OLD = "KubernetesTooOld"
    KUBERNETES_VERSION_UNKNOWN = "KubernetesVersionUnknown"
    ADMISSION_POLICY_NOT_SERVED = "AdmissionPolicyNotServed"
    NO_GVISOR_NODE = "NoGvisorNode"
    CONTAINERD_TOO_OLD = "ContainerdTooOld"
    RUNTIME_VERSION_UNKNOWN = "RuntimeVersionUnknown"
    NOT_CONTAINERD = "NotContainerd"
    RUNSC_HANDLER_MISSING = "RunscHandlerMissing"
    HANDLERS_NOT_REPORTED = "HandlersNotReported"


@dataclass(frozen=True)
class Finding:
    problem: SupportProblem
    severity: Severity
    message: str
    node: str | None = None

    @property
    def error(self) -> bool:
        return self.severity is Severity.ERROR


def errors(findings: Iterable[Finding]) -> list[Finding]:
    return [finding for finding in findings if finding.error]


def warnings(findings: Iterable[Finding]) -> list[Finding]:
    return [finding for finding in findings if not finding.error]


def quoted(value: object) -> str:
    """`value` as it may be shown: printable ASCII, bounded; a non-string by its type."""
    if not isinstance(value, str):
        return f"<{type(value).__name__}>"
    shown = "".join(c if " " <= c <= "~" else "?" for c in value[:QUOTED_CHARACTERS])
    return shown + ("..." if len(value) > QUOTED_CHARACTERS else "")


def kubernetes_version(version: object) -> tuple[int, int] | None:
    """(major, minor) from a `/version` body's gitVersion, or None when it has none."""
    git_version = version.get("gitVersion") if isinstance(version, Mapping) else None
    if not isinstance(git_version, str):
        return None
    match = _KUBERNETES_VERSION.match(git_version[:QUOTED_CHARACTERS])
    return (int(match[1]), int(match[2])) if match else None


def server_findings(version: object, admission_discovery: object, server: str) -> list[Finding]:
    """What keeps openblox off the API server at `server`: `version` is its `/version`
    body; `admission_discovery` the body of ADMISSION_DISCOVERY_PATH, None when the
    server answered that path with 404 (the group version is not served at all)."""
    return [
        *_version_findings(version, server),
        *_admission_findings(admission_discovery, server),
    ]


def _version_findings(version: object, server: str) -> list[Finding]:
    found = kubernetes_version(version)
    git_version = version.get("gitVersion") if isinstance(version, Mapping) else version
    if found is None:
        return [
            Finding(
                SupportProblem.KUBERNETES_VERSION_UNKNOWN,
                Severity.WARNING,
                f"the API server at {server} gives no version openblox can read "
                f"(gitVersion {quoted(git_version)}); openblox needs "
                f"{MINIMUM_KUBERNETES_TEXT} or newer, and this was not checked",
            )
        ]
    if found >= MINIMUM_KUBERNETES:
        return []
    return [
        Finding(
            SupportProblem.KUBERNETES_TOO_OLD,
            Severity.ERROR,
            f"openblox needs {MINIMUM_KUBERNETES_TEXT} or newer ({MINIMUM_BECAUSE}); "
            f"the API server at {server} is {quoted(git_version)}",
        )
    ]


def _admission_findings(discovery: object, server: str) -> list[Finding]:
    served = _served_resources(discovery)
    missing = [name for name in ADMISSION_POLICY_RESOURCES if name not in served]
    if not missing:
        return []
    what = (
        f"does not serve {ADMISSION_GROUP_VERSION} at all"
        if discovery is None
        else f"does not serve {', '.join(missing)} in {ADMISSION_GROUP_VERSION}"
    )
    return [
        Finding(
            SupportProblem.ADMISSION_POLICY_NOT_SERVED,
            Severity.ERROR,
            f"openblox needs ValidatingAdmissionPolicy {ADMISSION_GROUP_VERSION} "
            f"({MINIMUM_KUBERNETES_TEXT} or newer, where it is on by default); the API server "
            f"at {server} {what} (is it turned off with --runtime-config?)",
        )
    ]


def _served_resources(discovery: object) -> set[str]:
    """The resource names an APIResourceList lists; none for anything else."""
    if not isinstance(discovery, Mapping):
        return set()
    resources = discovery.get("resources")
    if not isinstance(resources, list):
        return set()
    return {
        resource["name"]
        for resource in resources
        if isinstance(resource, Mapping) and isinstance(resource.get("name"), str)
    }


def node_findings(node_list: object) -> list[Finding]:
    """What keeps the nodes labelled LABEL_GVISOR_NODE=true from running openblox's
    sandboxes, from a NodeList body; nodes without the label run none, and are not read."""
    nodes = [node for node in _items(node_list) if _labelled_for_gvisor(node)]
    if not nodes:
        return [
            Finding(
                SupportProblem.NO_GVISOR_NODE,
                Severity.WARNING,
                f"no node is labelled {LABEL_GVISOR_NODE}=true: every Sandbox stays "
                f"RuntimeUnavailable until a node with gVisor's {RUNTIME_HANDLER_GVISOR} "
                "handler is labelled (docs/runtimes.md)",
            )
        ]
    return [finding for node in nodes for finding in _one_node(node)]


def _items(node_list: object) -> list[Mapping[str, Any]]:
    items = node_list.get("items") if isinstance(node_list, Mapping) else None
    if not isinstance(items, list):
        return []
    return [item for item in items if isinstance(item, Mapping)]


def _field(body: Mapping[str, Any], *keys: str) -> object:
    value: object = body
    for key in keys:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _labelled_for_gvisor(node: Mapping[str, Any]) -> bool:
    labels = _field(node, "metadata", "labels")
    return isinstance(labels, Mapping) and labels.get(LABEL_GVISOR_NODE) == "true"


def _one_node(node: Mapping[str, Any]) -> list[Finding]:
    name = quoted(_field(node, "metadata", "name"))
    return [*_runtime_findings(node, name), *_handler_findings(node, name)]


def _runtime_findings(node: Mapping[str, Any], name: str) -> list[Finding]:
    reported = _field(node, "status", "nodeInfo", "containerRuntimeVersion")
    text = reported if isinstance(reported, str) else ""
    match = _RUNTIME_VERSION.match(text)
    if match is None:
        return [
            Finding(
                SupportProblem.RUNTIME_VERSION_UNKNOWN,
                Severity.WARNING,
                f"node {name} reports no container runtime version openblox can read "
                f"({quoted(reported)}); openblox needs containerd "
                f"{MINIMUM_CONTAINERD_MAJOR}.0 or newer there, and this was not checked",
                node=name,
            )
        ]
    runtime, major = match[1], int(match[2])
    version = f"{major}.{match[3]}"
    if runtime != "containerd":
        return [
            Finding(
                SupportProblem.NOT_CONTAINERD,
                Severity.WARNING,
                f"node {name} runs {runtime} {version}; openblox is built and tested for "
                f"containerd {MINIMUM_CONTAINERD_MAJOR}.0 or newer (its runsc handler and "
                "NRI plugin), and this node was not checked further",
                node=name,
            )
        ]
    if major >= MINIMUM_CONTAINERD_MAJOR:
        return []
    return [
        Finding(
            SupportProblem.CONTAINERD_TOO_OLD,
            Severity.ERROR,
            f"node {name} runs containerd {quoted(text.partition('://')[2])}; openblox "
            f"needs containerd {MINIMUM_CONTAINERD_MAJOR}.0 or newer on every node labelled "
            f"{LABEL_GVISOR_NODE}=true",
            node=name,
        )
    ]


def _handler_findings(node: Mapping[str, Any], name: str) -> list[Finding]:
    handlers = _field(node, "status", "runtimeHandlers")
    names = (
        [_field(h, "name") for h in handlers if isinstance(h, Mapping)]
        if isinstance(handlers, list)
        else []
    )
    if not names:
        # An older kubelet or runtime reports none: that is not proof the handler is missing.
        return [
            Finding(
                SupportProblem.HANDLERS_NOT_REPORTED,
                Severity.WARNING,
                f"node {name} reports no runtime handlers (status.runtimeHandlers is empty), "
                f"so whether its containerd has a {RUNTIME_HANDLER_GVISOR} handler was not "
                "checked",
                node=name,
            )
        ]
    if RUNTIME_HANDLER_GVISOR in names:
        return []
    shown = [quoted(h) if h else "(default)" for h in names[:QUOTED_HANDLERS]]
    more = f" and {len(names) - QUOTED_HANDLERS} more" if len(names) > QUOTED_HANDLERS else ""
    return [
        Finding(
            SupportProblem.RUNSC_HANDLER_MISSING,
            Severity.ERROR,
            f"node {name} is labelled {LABEL_GVISOR_NODE}=true, but its containerd has no "
            f"{RUNTIME_HANDLER_GVISOR} handler (it reports {', '.join(shown)}{more}); add "
            f'one running gVisor with network = "none" (docs/runtimes.md)',
            node=name,
        )
    ]


def refusal(findings: Sequence[Finding], outcome: str) -> str | None:
    """The one message that refuses the cluster, ending with `outcome` (what happened
    instead: "nothing was installed"), or None when nothing is an error."""
    found = errors(findings)
    if not found:
        return None
    if len(found) == 1:
        return f"{found[0].message}; {outcome}"
    lines = "\n".join(f"- {finding.message}" for finding in found)
    return f"openblox does not support this cluster:\n{lines}\n{outcome}"
