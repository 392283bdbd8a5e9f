"""The parameters the Sandbox admission policy reads, derived from the profiles.

CEL cannot parse the YAML in the profiles ConfigMap, so the operator publishes, per
profile, one line a policy can check with string functions alone: first the scope,
`*` (every opted-in namespace) or space-separated `ns:<name>` and `label:<key>=<value>`
tokens (a namespace matches if it is named, or if it carries every listed label); then
the longest lifetime a Sandbox may ask for, `maxAgeSeconds:<n> idleTimeoutSeconds:<n>`.
A line without the lifetime tokens (published by an older operator) leaves the lifetime
to the operator's own check, which reports `LifetimeTooLong`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from openblox.models.profile import Profile
from openblox.names import FIELD_MANAGER, LABEL_MANAGED_BY, OPERATOR_NAMESPACE

ADMISSION_CONFIGMAP = "openblox-profile-admission"
ALL_OPTED_IN = "*"
MAX_AGE_TOKEN = "maxAgeSeconds:"
IDLE_TIMEOUT_TOKEN = "idleTimeoutSeconds:"


def admission_entry(profile: Profile) -> str:
    lifetime = [
        f"{MAX_AGE_TOKEN}{profile.lifetime.max_age_seconds}",
        f"{IDLE_TIMEOUT_TOKEN}{profile.lifetime.idle_timeout_seconds}",
    ]
    return " ".join([*_scope_tokens(profile), *lifetime])


def _scope_tokens(profile: Profile) -> list[str]:
    scope = profile.namespaces
    if scope is None or scope.match_labels == ():
        # No scope, or an empty selector, which as in Kubernetes matches every namespace.
        return [ALL_OPTED_IN]
    tokens = [f"ns:{name}" for name in sorted(scope.names)]
    tokens += [f"label:{key}={value}" for key, value in sorted(scope.match_labels or ())]
    return tokens


def build_admission_configmap(profiles: Mapping[str, Profile]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": ADMISSION_CONFIGMAP,
            "namespace": OPERATOR_NAMESPACE,
            "labels": {LABEL_MANAGED_BY: FIELD_MANAGER},
        },
        "data": {name: admission_entry(profile) for name, profile in sorted(profiles.items())},
    }
