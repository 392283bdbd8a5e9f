"""Names that users, manifests, tests and tooling depend on.

The CRD (crds/sandbox.yaml), the manifests and the documents spell them out too.
Changing one is an API change: write an ADR (docs/adr/) first.
"""

from enum import StrEnum
from typing import Final

GROUP: Final = "openblox.sh"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "Sandbox"
PLURAL: Final = "sandboxes"

OPERATOR_NAMESPACE: Final = "openblox-system"
PROFILES_CONFIGMAP: Final = "openblox-profiles"
POOLS_CONFIGMAP: Final = "openblox-pools"
# The command-line tool, and the name the client gives itself (its user agent, the MCP
# server's name).
COMMAND: Final = "openblox"
# The operator: its Deployment and program, the user agent of its requests, the field
# manager of what it writes.
OPERATOR: Final = "openblox-operator"
FIELD_MANAGER: Final = OPERATOR
# The coordination.k8s.io Lease in OPERATOR_NAMESPACE whose holder is the one replica
# that writes (reconciles, reaps, publishes); the others stand by with warm caches.
LEADER_LEASE: Final = OPERATOR

LABEL_SANDBOX: Final = "openblox.sh/sandbox"
LABEL_PROFILE: Final = "openblox.sh/profile"
# On a warm pool pod until it is handed out (value: the pool's name); a pool pod carries
# LABEL_SANDBOX with an empty value, so the pod admission policy and the default-deny
# NetworkPolicy cover it from its creation.
LABEL_POOL: Final = "openblox.sh/pool"
# On a cold sandbox pod from its creation until the operator's boundary probe has found
# the boundary its profile claims; while it is there, admission lets no one but the
# operator exec, attach or port-forward into the pod, so no caller's process runs in it
# before the probe (which reads what it finds in the pod) has given its verdict.
LABEL_UNVERIFIED: Final = "openblox.sh/unverified"
LABEL_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
MANAGED_BY: Final = "openblox"
LABEL_NAMESPACE_OPT_IN: Final = "openblox.sh/sandboxes"
NAMESPACE_OPT_IN_VALUE: Final = "enabled"

ANNOTATION_LAST_ACTIVITY: Final = "openblox.sh/last-activity"
ANNOTATION_PROFILE_DIGEST: Final = "openblox.sh/profile-digest"
# On sandbox pods: the profile's process cap, which openblox's NRI plugin
# (node-agent/nri.go) sets as the sandbox container's RLIMIT_NPROC; and runsc's own
# per-pod switch that makes it enforce the pod's seccomp profile inside the sandbox
# (docs/adr/0007).
ANNOTATION_PROCESSES: Final = "openblox.sh/processes"
ANNOTATION_RUNSC_OCI_SECCOMP: Final = "dev.gvisor.flag.oci-seccomp"
# On sandbox pods: NRI's default validator (containerd 2, docs/adr/0016) refuses to create
# the sandbox container unless these plugins took part in creating it, so a node whose
# openblox plugin crashed, timed out or is missing fails the container instead of
# starting it without noexec scratch and the process cap. Inert where no validator runs.
ANNOTATION_NRI_REQUIRED_PLUGINS: Final = "required-plugins.noderesource.dev/container.sandbox"
NRI_PLUGIN_NAME: Final = "openblox"
# Relative to the kubelet's seccomp directory, where the node agent installs
# node-agent/sandbox-seccomp.json.
SECCOMP_LOCALHOST_PROFILE: Final = "openblox/sandbox.json"
# On a warm pool pod once the operator's boundary probe saw its profile's boundary; only
# the operator may write a sandbox pod, so it survives an operator restart unforged.
ANNOTATION_BOUNDARY: Final = "openblox.sh/boundary"

NETWORK_POLICY_NAME: Final = "openblox-default-deny"

RUNTIME_CLASS_GVISOR: Final = "gvisor"
# The gvisor RuntimeClass's handler (runtimeclasses/gvisor.yaml): the name each gVisor
# node's containerd gives its runsc runtime.
RUNTIME_HANDLER_GVISOR: Final = "runsc"
# Admins put it (value "true") on the nodes that have that handler: openblox's node agent
# runs there (manifests/node-agent.yaml).
LABEL_GVISOR_NODE: Final = "openblox.sh/gvisor"
# The node agent puts it (value "true") on its node while every check holds; the gvisor
# RuntimeClass's nodeSelector schedules gVisor pods only there (ADR 0020).
LABEL_GVISOR_READY: Final = "openblox.sh/gvisor-ready"
NODE_AGENT_NAMESPACE: Final = "openblox-node"
# The node agent's condition on its Node: why the node is, or is not, ready.
CONDITION_NODE_AGENT: Final = "OpenbloxSandboxesReady"
RUNTIME_CLASS_KATA: Final = "kata"
# Ordered weakest to strongest; runc is never approved for untrusted code.
APPROVED_RUNTIME_CLASSES: Final = (RUNTIME_CLASS_GVISOR, RUNTIME_CLASS_KATA)

# Inside the sandbox pod: exec, file transfer and the conformance suite address these.
CONTAINER_NAME: Final = "sandbox"
WORKSPACE_DIR: Final = "/workspace"
TMP_DIR: Final = "/tmp"
STATE_DIR: Final = "/run/openblox"


class ConditionType(StrEnum):
    """Condition types on a Sandbox's status; Ready summarises the others."""

    READY = "Ready"
    PROFILE_RESOLVED = "ProfileResolved"
    RUNTIME_AVAILABLE = "RuntimeAvailable"
    POD_READY = "PodReady"


class Reason(StrEnum):
    """Condition reasons; callers and models match on these, so they are API."""

    READY = "Ready"
    PROFILE_RESOLVED = "ProfileResolved"
    RUNTIME_AVAILABLE = "RuntimeAvailable"
    POD_READY = "PodReady"

    PROFILE_NOT_FOUND = "ProfileNotFound"
    PROFILE_NOT_ALLOWED = "ProfileNotAllowed"
    PROFILE_INVALID = "ProfileInvalid"
    LIFETIME_TOO_LONG = "LifetimeTooLong"
    SANDBOX_INVALID = "SandboxInvalid"

    PROFILE_NOT_RESOLVED = "ProfileNotResolved"
    RUNTIME_NOT_CHECKED = "RuntimeNotChecked"
    RUNTIME_UNAVAILABLE = "RuntimeUnavailable"
    BOUNDARY_MISMATCH = "BoundaryMismatch"
    NODE_NOT_PREPARED = "NodeNotPrepared"

    POD_NOT_CREATED = "PodNotCreated"
    POD_PENDING = "PodPending"
    IMAGE_NOT_PULLED = "ImageNotPulled"
    POD_FAILED = "PodFailed"
    POD_CONFLICT = "PodConflict"
    NODE_LOST = "NodeLost"

    EXPIRED = "Expired"

    # Events on the openblox-pools ConfigMap, for the admin who wrote it.
    POOL_REFUSED = "PoolRefused"
    POOL_PROFILE_NOT_FOUND = "PoolProfileNotFound"
    POOL_EXCEEDS_QUOTA = "PoolExceedsQuota"
    POOL_POD_FAILED = "PoolPodFailed"

    # On a Node whose agent stopped renewing its Lease: the operator took its label off.
    NODE_AGENT_SILENT = "NodeAgentSilent"

    # The reason of the Event that carries a denial record (docs/denials.md) as its message.
    DENIED = "Denied"

    # On the operator's own Pod: the API server is older than openblox supports, or does
    # not serve an API it needs; the operator waits instead of starting.
    UNSUPPORTED_KUBERNETES = "UnsupportedKubernetes"
