"""The per-namespace NetworkPolicy that cuts sandbox pods off in both directions.

The RuntimeClass already gives gVisor sandboxes no external interface; this policy is
the second, independent wall for any runtime whose pods do get one (Kata, unsafe ones).
"""

from typing import Any

from openblox.names import LABEL_MANAGED_BY, LABEL_SANDBOX, MANAGED_BY, NETWORK_POLICY_NAME


def build_network_policy(namespace: str) -> dict[str, Any]:
    """Default deny: selects every sandbox pod and, listing no rules, allows no traffic."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": NETWORK_POLICY_NAME,
            "namespace": namespace,
            "labels": {LABEL_MANAGED_BY: MANAGED_BY},
        },
        "spec": {
            "podSelector": {"matchExpressions": [{"key": LABEL_SANDBOX, "operator": "Exists"}]},
            "policyTypes": ["Ingress", "Egress"],
        },
    }
