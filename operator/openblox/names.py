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
FIELD_MANAGER: Final = "openblox-operator"
# The coordination.k8s.io Lease in OPERATOR_NAMESPACE whose holder is the one replica
# that writes (reconciles, reaps, publishes); the others stand by with warm caches.
LEADER_LEASE: Final = "openblox-operator"

LABEL_SANDBOX: Final = "openblox.sh/sandbox"
LABEL_PROFILE: Final = "openblox.sh/profile"
LABEL_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
MANAGED_BY: Final = "openblox"
LABEL_NAMESPACE_OPT_IN: Final = "openblox.sh/sandboxes"
NAMESPACE_OPT_IN_VALUE: Final = "enabled"

ANNOTATION_LAST_ACTIVITY: Final = "openblox.sh/last-activity"
ANNOTATION_PROFILE_DIGEST: Final = "openblox.sh/profile-digest"

NETWORK_POLICY_NAME: Final = "openblox-default-deny"

# Ordered weakest to strongest; runc is never approved for untrusted code.
APPROVED_RUNTIME_CLASSES: Final = ("gvisor", "kata")

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

    POD_NOT_CREATED = "PodNotCreated"
    POD_PENDING = "PodPending"
    POD_FAILED = "PodFailed"
    POD_CONFLICT = "PodConflict"

    EXPIRED = "Expired"

    # The reason of the Event that carries a denial record (docs/denials.md) as its message.
    DENIED = "Denied"
