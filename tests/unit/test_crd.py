"""The Sandbox CRD: its shape, and its agreement with the Python models.

The API server checks the schema itself (structural rules, CEL compilation) when the
CRD is applied; these checks keep it in step with the code, without a cluster.
"""

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args

import pytest
import yaml

from openblox.lifetime import ExpiryReason
from openblox.models import Boundary
from openblox.names import GROUP, KIND, PLURAL, VERSION, ConditionType, Reason

CRD_PATH = Path(__file__).parents[2] / "crds" / "sandbox.yaml"
CRD: dict[str, Any] = yaml.safe_load(CRD_PATH.read_text())
[SERVED] = CRD["spec"]["versions"]
ROOT: dict[str, Any] = SERVED["schema"]["openAPIV3Schema"]
SPEC: dict[str, Any] = ROOT["properties"]["spec"]
STATUS: dict[str, Any] = ROOT["properties"]["status"]
CONDITION: dict[str, Any] = STATUS["properties"]["conditions"]["items"]


def schemas(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, schema
    for name, child in schema.get("properties", {}).items():
        yield from schemas(child, f"{path}.{name}")
    if "items" in schema:
        yield from schemas(schema["items"], f"{path}[]")


def test_names_match_the_design() -> None:
    assert CRD["metadata"]["name"] == f"{PLURAL}.{GROUP}"
    assert CRD["spec"]["group"] == GROUP
    assert CRD["spec"]["scope"] == "Namespaced"
    names = CRD["spec"]["names"]
    assert (names["kind"], names["plural"]) == (KIND, PLURAL)
    assert names["shortNames"] == ["sbx"]
    assert names["categories"] == ["openblox"]
    assert (SERVED["name"], SERVED["served"], SERVED["storage"]) == (VERSION, True, True)
    assert SERVED["subresources"] == {"status": {}}


def test_every_field_is_typed_and_documented_for_kubectl_explain() -> None:
    for path, schema in schemas(ROOT):
        if path == ".metadata":
            continue  # the API server supplies ObjectMeta's schema
        assert "type" in schema, f"{path or 'root'} has no type"
        assert schema.get("description", "").strip(), f"{path or 'root'} has no description"


def test_spec_holds_intent_only_and_prunes_everything_else() -> None:
    assert SPEC["required"] == ["profile"]
    assert set(SPEC["properties"]) == {"profile", "idleTimeoutSeconds", "maxAgeSeconds"}
    preserving = [
        path for path, s in schemas(ROOT) if s.get("x-kubernetes-preserve-unknown-fields")
    ]
    assert preserving == [".status.denials[]"]


def test_profile_is_a_required_immutable_dns_label() -> None:
    profile = SPEC["properties"]["profile"]
    assert (profile["type"], profile["minLength"], profile["maxLength"]) == ("string", 1, 63)
    assert profile["x-kubernetes-validations"] == [
        {"rule": "self == oldSelf", "message": "profile is immutable"}
    ]
    pattern = re.compile(profile["pattern"])
    assert pattern.search("code-exec")
    assert not any(pattern.search(name) for name in ["Code", "-a", "a-", "a.b", "a_b"])


@pytest.mark.parametrize("field", ["idleTimeoutSeconds", "maxAgeSeconds"])
def test_lifetime_fields_are_positive_integers(field: str) -> None:
    schema = SPEC["properties"][field]
    assert (schema["type"], schema["minimum"]) == ("integer", 1)


def test_sandbox_names_are_limited_to_dns_labels_at_the_root() -> None:
    rules = {rule["rule"]: rule["message"] for rule in ROOT["x-kubernetes-validations"]}
    assert rules["self.metadata.name.size() <= 63"] == (
        "Sandbox names must be at most 63 characters (they label the pod)"
    )
    assert "!self.metadata.name.contains('.')" in rules


def test_conditions_follow_kep_1623() -> None:
    conditions = STATUS["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    assert set(CONDITION["required"]) == {
        "type",
        "status",
        "reason",
        "message",
        "observedGeneration",
        "lastTransitionTime",
    }
    assert CONDITION["properties"]["status"]["enum"] == ["True", "False", "Unknown"]


def test_every_condition_type_and_reason_the_operator_writes_is_accepted() -> None:
    type_pattern = re.compile(CONDITION["properties"]["type"]["pattern"])
    reason_pattern = re.compile(CONDITION["properties"]["reason"]["pattern"])
    assert all(type_pattern.fullmatch(kind) for kind in ConditionType)
    assert all(reason_pattern.fullmatch(reason) for reason in Reason)


def test_status_enums_match_the_models() -> None:
    properties = STATUS["properties"]
    assert properties["boundary"]["enum"] == list(get_args(Boundary))
    assert properties["expiryReason"]["enum"] == list(get_args(ExpiryReason))
    assert properties["denials"]["maxItems"] == 20


def test_printer_columns() -> None:
    columns = {column["name"]: column for column in SERVED["additionalPrinterColumns"]}
    assert list(columns) == ["Profile", "Ready", "Reason", "Boundary", "Expires", "Age"]
    assert columns["Ready"]["jsonPath"] == '.status.conditions[?(@.type=="Ready")].status'
    assert columns["Reason"]["jsonPath"] == '.status.conditions[?(@.type=="Ready")].reason'
    # A string: kubectl renders a future date column as <invalid>.
    assert columns["Expires"]["type"] == "string"
    assert columns["Age"]["jsonPath"] == ".metadata.creationTimestamp"
