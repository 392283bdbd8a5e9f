"""Control plane, what the operator enforces and reports: a missing runtime fails closed,
a Sandbox cannot be given a longer life, and its status cannot be forged by a client.

Helpers and the identity are shared with control_plane.py.
"""

from __future__ import annotations

import time
from typing import Any

from openblox.client.cluster import sandboxes_path
from openblox.conformance.checks.control_plane import (
    attempt,
    dry_run,
    identity,
    judge,
    plane,
    sandbox_manifest,
)
from openblox.conformance.checks.registry import check
from openblox.conformance.cluster_api import Kube, message_of
from openblox.conformance.context import CannotRun, Context, Verdict, fail, ok
from openblox.names import LABEL_SANDBOX, ConditionType, Reason
from openblox.transport import MERGE_PATCH, ApiError, path


def _watch_sandbox(
    kube: Kube, namespace: str, name: str, seconds: float
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The Ready condition once it settles (or at the end), and the pods made for it."""
    deadline = time.monotonic() + seconds
    condition: dict[str, Any] = {}
    while time.monotonic() < deadline:
        body = kube.api.get(sandboxes_path(namespace, name))
        for c in (body.get("status") or {}).get("conditions") or []:
            if c.get("type") == ConditionType.READY:
                condition = c
        if condition.get("status") == "True" or condition.get("reason") not in (
            None,
            Reason.POD_PENDING,
            Reason.POD_NOT_CREATED,
            Reason.RUNTIME_NOT_CHECKED,
            Reason.PROFILE_NOT_RESOLVED,
        ):
            break
        time.sleep(1)
    pods: list[dict[str, Any]] = kube.api.get(
        path(plural="pods", namespace=namespace), labelSelector=f"{LABEL_SANDBOX}={name}"
    )["items"]
    return condition, pods


def _pods_text(pods: list[dict[str, Any]]) -> str:
    if not pods:
        return "no pod was made"
    return ", ".join(
        f"pod {p['metadata']['name']} runtimeClassName {p['spec'].get('runtimeClassName')} "
        f"phase {(p.get('status') or {}).get('phase')}"
        for p in pods
    )


@check("CTL-008")
def fails_closed(ctx: Context) -> Verdict:
    p = plane(ctx)
    profile = p.unavailable_profile
    if not profile:
        raise CannotRun(
            "no profile with an unavailable runtime was named "
            "(OPENBLOX_CONFORMANCE_UNAVAILABLE_PROFILE / --unavailable-profile)"
        )
    name = ctx.token()
    kube = ctx.kube
    try:
        kube.api.post(
            sandboxes_path(p.sandbox_namespace), sandbox_manifest(name, {"profile": profile})
        )
    except ApiError as error:
        raise CannotRun(
            f"could not create a Sandbox with {profile}: {message_of(error)}"
        ) from error
    try:
        condition, pods = _watch_sandbox(kube, p.sandbox_namespace, name, 60)
    finally:
        kube.api.delete(sandboxes_path(p.sandbox_namespace, name))
    reason, message = condition.get("reason"), str(condition.get("message", ""))[:200]
    running = [x for x in pods if (x.get("status") or {}).get("phase") == "Running"]
    text = f"profile {profile}: Ready {condition.get('status')} {reason}: {message}; " + _pods_text(
        pods
    )
    if condition.get("status") == "True" or running:
        return fail(f"it runs: {text}")
    if reason in (Reason.PROFILE_NOT_FOUND, Reason.PROFILE_NOT_ALLOWED, Reason.PROFILE_INVALID):
        raise CannotRun(f"{profile} cannot be used here for another reason: {text}")
    if reason != Reason.RUNTIME_UNAVAILABLE:
        return fail(f"not refused as runtime-unavailable within 60s: {text}")
    return ok(text)


@check("CTL-009")
def cannot_lengthen_life(ctx: Context) -> Verdict:
    p = plane(ctx)
    who = identity(ctx)
    name = ctx.token()
    spec = {"profile": ctx.profile, "maxAgeSeconds": 10**9, "idleTimeoutSeconds": 10**9}
    try:
        who.api.post(sandboxes_path(p.sandbox_namespace), sandbox_manifest(name, spec))
    except ApiError as error:
        return ok(f"refused at the door: {message_of(error)[:200]}")
    try:
        condition, pods = _watch_sandbox(ctx.kube, p.sandbox_namespace, name, 60)
    finally:
        ctx.kube.api.delete(sandboxes_path(p.sandbox_namespace, name))
    text = (
        f"maxAgeSeconds and idleTimeoutSeconds 10^9: Ready {condition.get('status')} "
        f"{condition.get('reason')}: {str(condition.get('message', ''))[:160]}; {_pods_text(pods)}"
    )
    if condition.get("status") == "True" or pods:
        return fail(text)
    return ok(text)


@check("CTL-010")
def cannot_forge_status(ctx: Context) -> Verdict:
    who, p = identity(ctx), plane(ctx)
    handle = ctx.sandbox()
    forged = {"status": {"boundary": "kata", "podName": "elsewhere"}}
    return judge(
        [
            attempt(
                "patch sandboxes/status",
                lambda: dry_run(
                    who,
                    "PATCH",
                    f"{sandboxes_path(p.sandbox_namespace, handle.name)}/status",
                    forged,
                    MERGE_PATCH,
                ),
            ),
            _status_through_main(who, p.sandbox_namespace, handle.name, forged),
        ]
    )


def _status_through_main(
    who: Kube, namespace: str, name: str, forged: dict[str, Any]
) -> tuple[str, bool, str]:
    what = "patch status through the main resource"
    try:
        stored = dry_run(who, "PATCH", sandboxes_path(namespace, name), forged, MERGE_PATCH)
    except ApiError as error:
        return what, True, message_of(error)[:200]
    boundary = (stored.get("status") or {}).get("boundary")
    if boundary == "kata":
        return what, False, "the forged status was stored"
    return what, True, f"accepted, status ignored (boundary stays {boundary})"
