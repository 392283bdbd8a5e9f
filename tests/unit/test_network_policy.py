from openblox.builders import build_network_policy


def test_denies_all_traffic_to_and_from_every_sandbox_pod() -> None:
    policy = build_network_policy("team-a")

    assert policy == {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": "openblox-default-deny",
            "namespace": "team-a",
            "labels": {"app.kubernetes.io/managed-by": "openblox"},
        },
        "spec": {
            "podSelector": {
                "matchExpressions": [{"key": "openblox.sh/sandbox", "operator": "Exists"}]
            },
            "policyTypes": ["Ingress", "Egress"],
        },
    }
    # Listing both policy types with no rules is what makes it deny in both directions.
    assert "ingress" not in policy["spec"]
    assert "egress" not in policy["spec"]
