"""Control plane: a second identity with only the shipped ``openblox-client`` role, reached
by impersonation, tries to weaken or reach sandboxes through the API.

Writes that could change shared state are sent as server-side dry runs (admission and
authorization still apply to them), so even a wrongly allowed one changes nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from openblox.client.cluster import sandboxes_path
from openblox.conformance.backend import ControlPlane
from openblox.conformance.checks.registry import check
from openblox.conformance.cluster_api import Kube, message_of
from openblox.conformance.context import CannotRun, Context, Verdict, fail, ok
from openblox.names import GROUP, KIND, VERSION, ConditionType
from openblox.transport import STRATEGIC_MERGE_PATCH, ApiError, path
from openblox.transport.rest import JSON

DRY = "All"


def plane(ctx: Context) -> ControlPlane:
    if ctx.backend.control_plane is None:
        raise CannotRun("the backend exposes no control plane")
    return ctx.backend.control_plane


def identity(ctx: Context) -> Kube:
    """The probe identity, after proving it can do what a client may (else every refusal
    below would prove nothing)."""
    who = ctx.probe_identity()
    try:
        who.api.get(sandboxes_path(plane(ctx).sandbox_namespace))
    except ApiError as error:
        raise CannotRun(
            f"the probe identity cannot even list Sandboxes in its own namespace: "
            f"{message_of(error)}"
        ) from error
    return who


def attempt(what: str, call: Callable[[], Any]) -> tuple[str, bool, str]:
    """(what, refused, detail)."""
    try:
        call()
    except ApiError as error:
        return what, True, message_of(error)[:200]
    return what, False, "allowed"


def judge(attempts: list[tuple[str, bool, str]], preface: str = "") -> Verdict:
    text = "; ".join(f"{what}: {detail}" for what, _, detail in attempts)
    allowed = [what for what, refused, _ in attempts if not refused]
    if allowed:
        return fail(f"{preface}allowed: {allowed}. {text}")
    return ok(f"{preface}{text}")


@check("CTL-001")
def cannot_read_profiles(ctx: Context) -> Verdict:
    who, p = identity(ctx), plane(ctx)
    return judge(
        [
            attempt(
                f"get configmap {p.operator_namespace}/{p.profiles_configmap}",
                lambda: who.api.get(_configmap(p.operator_namespace, p.profiles_configmap)),
            ),
            attempt(
                f"list configmaps in {p.operator_namespace}",
                lambda: who.api.get(_configmap(p.operator_namespace)),
            ),
            attempt(
                "list configmaps in all namespaces",
                lambda: who.api.get(path(plural="configmaps")),
            ),
        ]
    )


@check("CTL-002")
def cannot_change_profiles(ctx: Context) -> Verdict:
    who, p = identity(ctx), plane(ctx)
    evil = {"data": {"code-exec": "image: evil\nruntimeClassName: runc\nunsafe: true\n"}}
    return judge(
        [
            attempt(
                "patch the profiles",
                lambda: dry_run(
                    who,
                    "PATCH",
                    _configmap(p.operator_namespace, p.profiles_configmap),
                    evil,
                    STRATEGIC_MERGE_PATCH,
                ),
            ),
            attempt(
                "delete the profiles",
                lambda: dry_run(
                    who, "DELETE", _configmap(p.operator_namespace, p.profiles_configmap)
                ),
            ),
            attempt(
                "create a configmap in the operator's namespace",
                lambda: dry_run(
                    who,
                    "POST",
                    _configmap(p.operator_namespace),
                    {"metadata": {"name": "openblox-conformance-evil"}, "data": evil["data"]},
                ),
            ),
            attempt(
                "patch the published admission parameters",
                lambda: dry_run(
                    who,
                    "PATCH",
                    _configmap(p.operator_namespace, "openblox-profile-admission"),
                    {"data": {"evil": "*"}},
                    STRATEGIC_MERGE_PATCH,
                ),
            ),
        ]
    )


def _configmap(namespace: str, name: str | None = None) -> str:
    return path(plural="configmaps", namespace=namespace, name=name)


def dry_run(
    who: Kube,
    method: str,
    request_path: str,
    body: Any = None,
    content_type: str = JSON,
    **params: str,
) -> dict[str, Any]:
    """`method` on `request_path` as a server-side dry run: admitted and authorized as the
    real request would be, and nothing stored."""
    return who.api.request(
        method, request_path, body, params={"dryRun": DRY, **params}, content_type=content_type
    )


def sandbox_manifest(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {"name": name},
        "spec": spec,
    }


@check("CTL-003")
def sandbox_carries_nothing_else(ctx: Context) -> Verdict:
    who, p = identity(ctx), plane(ctx)
    weakening = {
        "profile": ctx.profile,
        "image": "docker.io/library/alpine:latest",
        "runtimeClassName": "runc",
        "user": 0,
        "runAsUser": 0,
        "securityContext": {"privileged": True, "capabilities": {"add": ["SYS_ADMIN"]}},
        "hostNetwork": True,
        "resources": {"limits": {"memory": "64Gi"}},
    }
    name = ctx.token()

    def create(field_validation: str) -> Any:
        return dry_run(
            who,
            "POST",
            sandboxes_path(p.sandbox_namespace),
            sandbox_manifest(name, weakening),
            fieldValidation=field_validation,
        )

    attempts = []
    strict = attempt(
        "create with image/runtime/user/caps (strict field validation)",
        lambda: create("Strict"),
    )
    attempts.append(strict)
    try:
        stored = create("Ignore")
        kept = sorted(set(stored.get("spec", {})) - {"profile"})
        attempts.append(
            (
                "the same, unknown fields ignored",
                not kept,
                f"stored spec keeps {kept}" if kept else "accepted with every such field pruned",
            )
        )
    except ApiError as error:
        attempts.append(("the same, unknown fields ignored", True, message_of(error)[:200]))
    return judge(attempts)


@check("CTL-004")
def profile_not_allowed(ctx: Context) -> Verdict:
    who, p = identity(ctx), plane(ctx)
    tries = [
        (
            "an unknown profile",
            p.sandbox_namespace,
            "obx-conformance-no-such-profile",
        ),
        (f"{ctx.profile} in a namespace that has not opted in", p.unopted_namespace, ctx.profile),
    ]
    if ctx.settings.restricted_profile:
        tries.append(
            (
                f"{ctx.settings.restricted_profile}, not allowed here",
                p.sandbox_namespace,
                ctx.settings.restricted_profile,
            )
        )
    attempts = []
    for what, namespace, profile in tries:
        name = ctx.token()

        def create(ns: str = namespace, prof: str = profile, n: str = name) -> Any:
            return who.api.post(sandboxes_path(ns), sandbox_manifest(n, {"profile": prof}))

        outcome = attempt(what, create)
        if not outcome[1]:
            # Allowed at the door: a Sandbox exists. See what it came to, then remove it.
            time.sleep(5)
            state = _ready(ctx.kube, namespace, name)
            ctx.kube.api.delete(sandboxes_path(namespace, name))
            outcome = (what, False, f"accepted by the API server (then: {state})")
        attempts.append(outcome)
    return judge(attempts)


def _ready(kube: Kube, namespace: str, name: str) -> str:
    try:
        body = kube.api.get(sandboxes_path(namespace, name))
    except ApiError as error:
        return message_of(error)
    for condition in (body.get("status") or {}).get("conditions") or []:
        if condition.get("type") == ConditionType.READY:
            return f"Ready {condition.get('status')} {condition.get('reason')}"
    return "no Ready condition yet"


# Pod Security "restricted" in full, so that the only thing left to refuse these is the
# rule that sandbox pods are the operator's.
