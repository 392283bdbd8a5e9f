"""A Sandbox's whole status, from one reconcile's observation. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from openblox.builders.conditions import Observation, compute_conditions
from openblox.denials import merge_recent
from openblox.models import Sandbox
from openblox.models.profile import ExecLimits, Profile
from openblox.names import ANNOTATION_PROFILE_DIGEST
from openblox.timestamps import format_timestamp


def build_status(
    sandbox: Sandbox,
    observation: Observation,
    *,
    pod_name: str | None,
    runtime_class_name: str | None,
    profile_digest: str | None,
    exec_limits: ExecLimits | None,
    now: datetime,
    process_cap: int | None = None,
) -> dict[str, Any]:
    previous: Mapping[str, Any] = sandbox.status
    status: dict[str, Any] = {
        "observedGeneration": sandbox.generation,
        "conditions": compute_conditions(
            observation, sandbox.generation, previous.get("conditions") or [], now
        ),
    }
    if pod_name:
        status["podName"] = pod_name
    if runtime_class_name:
        status["runtimeClassName"] = runtime_class_name
    if observation.observed_boundary:
        status["boundary"] = observation.observed_boundary
    if observation.expiry:
        status["expiresAt"] = format_timestamp(observation.expiry.expires_at)
        status["expiryReason"] = observation.expiry.reason
    if profile_digest:
        status["profileDigest"] = profile_digest
    if exec_limits:
        # The client enforces these per call; it cannot read the profiles themselves.
        status["execLimits"] = {
            "timeoutSeconds": exec_limits.timeout_seconds,
            "outputBytes": exec_limits.output_bytes,
        }
        if process_cap is not None:
            status["execLimits"]["processes"] = process_cap
    # Recent denials, most recent first and bounded; a reconcile keeps what is there.
    denials = merge_recent(previous.get("denials") or [], observation.denials)
    if denials:
        status["denials"] = denials
    return status


def profile_digest(pod: Mapping[str, Any] | None, profile: Profile | None) -> str | None:
    """The digest the running pod was built from; a profile edit does not rewrite it, so
    the status says what the pod is, not what the next pod would be."""
    if pod is not None:
        digest = (pod["metadata"].get("annotations") or {}).get(ANNOTATION_PROFILE_DIGEST)
        if digest:
            return str(digest)
    return profile.digest if profile else None


def status_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """A merge patch that makes `old` into `new`, removing fields `new` no longer has."""
    patch: dict[str, Any] = dict(new)
    for key in old:
        if key not in new:
            patch[key] = None
    return patch
