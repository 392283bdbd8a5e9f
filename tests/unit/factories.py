"""Builders of test inputs: a realistic Sandbox body and the shipped default profile."""

from datetime import UTC, datetime
from typing import Any

from openblox.models import Profile, Sandbox, parse_profile, parse_sandbox

CREATED = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
SANDBOX_UID = "0f4c2a9e-5d1b-4f3a-9c7e-2b8d6e1a3f50"

# A sandbox image pinned by digest, as every profile names its image.
PINNED_IMAGE = "openblox.local/sandbox@sha256:" + "5" * 64
IMAGE_LINE = f"image: {PINNED_IMAGE}\n"
# The code-exec profile as shipped: an image, every other field at its default.
DEFAULT_PROFILE_YAML = IMAGE_LINE


def default_profile(name: str = "code-exec") -> Profile:
    return parse_profile(name, DEFAULT_PROFILE_YAML)


def sandbox_body(
    *,
    name: str = "demo",
    namespace: str = "team-a",
    profile: str = "code-exec",
    spec: dict[str, Any] | None = None,
    annotations: dict[str, str] | None = None,
    status: dict[str, Any] | None = None,
    created: datetime = CREATED,
    uid: str = SANDBOX_UID,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "openblox.sh/v1alpha1",
        "kind": "Sandbox",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "generation": 1,
            "resourceVersion": "4711",
            "creationTimestamp": created.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "labels": {"team": "a"},
            "annotations": annotations or {},
        },
        "spec": {"profile": profile, **(spec or {})},
    }
    if status is not None:
        body["status"] = status
    return body


def make_sandbox(**kwargs: Any) -> Sandbox:
    return parse_sandbox(sandbox_body(**kwargs))
