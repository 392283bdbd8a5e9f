"""The parameters the Sandbox admission policy reads, derived from the profiles.

CEL cannot parse the YAML in the profiles ConfigMap, so the operator publishes, per
profile, one line a policy can check with string functions alone:
`*` (every opted-in namespace) or space-separated `ns:<name>` and `label:<key>=<value>`
tokens (a namespace matches if it is named, or if it carries every listed label).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from openblox.models.profile import Profile
from openblox.names import FIELD_MANAGER, OPERATOR_NAMESPACE

ADMISSION_CONFIGMAP = "openblox-profile-admission"
ALL_OPTED_IN = "*"


def admission_entry(profile: Profile) -> str:
    scope = profile.namespaces
    if scope is None or scope.match_labels == ():
        # No scope, or an empty selector, which as in Kubernetes matches every namespace.
        return ALL_OPTED_IN
    tokens = [f"ns:{name}" for name in sorted(scope.names)]
    tokens += [f"label:{key}={value}" for key, value in sorted(scope.match_labels or ())]
    return " ".join(tokens)


def build_admission_configmap(profiles: Mapping[str, Profile]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": ADMISSION_CONFIGMAP,
            "namespace": OPERATOR_NAMESPACE,
            "labels": {"app.kubernetes.io/managed-by": FIELD_MANAGER},
        },
        "data": {name: admission_entry(profile) for name, profile in sorted(profiles.items())},
    }
