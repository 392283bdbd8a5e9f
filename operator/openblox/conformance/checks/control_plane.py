"""Control plane: a second identity with only the shipped ``openblox-client`` role, reached
by impersonation, tries to weaken or reach sandboxes through the API.

Writes that could change shared state are sent as server-side dry runs (admission and
authorization still apply to them), so even a wrongly allowed one changes nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kubernetes.client.exceptions import ApiException

from openblox.conformance.backend import ControlPlane
from openblox.conformance.checks.registry import check
from openblox.conformance.context import CannotRun, Context, Verdict, fail, ok
from openblox.conformance.kube import Kube, message_of
from openblox.names import CONTAINER_NAME, GROUP, LABEL_SANDBOX, PLURAL, VERSION

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
        who.custom.list_namespaced_custom_object(
            GROUP, VERSION, plane(ctx).sandbox_namespace, PLURAL
        )
    except ApiException as error:
        raise CannotRun(
            f"the probe identity cannot even list Sandboxes in its own namespace: "
            f"{message_of(error)}"
        ) from error
    return who


def attempt(what: str, call: Callable[[], Any]) -> tuple[str, bool, str]:
    """(what, refused, detail)."""
    try:
        call()
    except ApiException as error:
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
                lambda: who.core.read_namespaced_config_map(
                    p.profiles_configmap, p.operator_namespace
                ),
            ),
            attempt(
                f"list configmaps in {p.operator_namespace}",
                lambda: who.core.list_namespaced_config_map(p.operator_namespace),
            ),
            attempt(
                "list configmaps in all namespaces",
                who.core.list_config_map_for_all_namespaces,
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
                lambda: who.core.patch_namespaced_config_map(
                    p.profiles_configmap, p.operator_namespace, evil, dry_run=DRY
                ),
            ),
            attempt(
                "delete the profiles",
                lambda: who.core.delete_namespaced_config_map(
                    p.profiles_configmap, p.operator_namespace, dry_run=DRY
                ),
            ),
            attempt(
                "create a configmap in the operator's namespace",
                lambda: who.core.create_namespaced_config_map(
                    p.operator_namespace,
                    {"metadata": {"name": "openblox-conformance-evil"}, "data": evil["data"]},
                    dry_run=DRY,
                ),
            ),
            attempt(
                "patch the published admission parameters",
                lambda: who.core.patch_namespaced_config_map(
                    "openblox-profile-admission",
                    p.operator_namespace,
                    {"data": {"evil": "*"}},
                    dry_run=DRY,
                ),
            ),
        ]
    )


def _sandbox(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Sandbox",
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
        return who.custom.create_namespaced_custom_object(
            GROUP,
            VERSION,
            p.sandbox_namespace,
            PLURAL,
            _sandbox(name, weakening),
            dry_run=DRY,
            field_validation=field_validation,
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
    except ApiException as error:
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
            return who.custom.create_namespaced_custom_object(
                GROUP, VERSION, ns, PLURAL, _sandbox(n, {"profile": prof})
            )

        outcome = attempt(what, create)
        if not outcome[1]:
            # Allowed at the door: a Sandbox exists. See what it came to, then remove it.
            time.sleep(5)
            state = _ready(ctx.kube, namespace, name)
            ctx.kube.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
            outcome = (what, False, f"accepted by the API server (then: {state})")
        attempts.append(outcome)
    return judge(attempts)


def _ready(kube: Kube, namespace: str, name: str) -> str:
    try:
        body = kube.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    except ApiException as error:
        return message_of(error)
    for condition in (body.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return f"Ready {condition.get('status')} {condition.get('reason')}"
    return "no Ready condition yet"


# Pod Security "restricted" in full, so that the only thing left to refuse these is the
# rule that sandbox pods are the operator's.
RESTRICTED = {
    "allowPrivilegeEscalation": False,
    "runAsNonRoot": True,
    "runAsUser": 1000,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def _fake_pod(namespace: str, name: str, image: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {LABEL_SANDBOX: name}},
        "spec": {
            "containers": [{"name": CONTAINER_NAME, "image": image, "securityContext": RESTRICTED}],
            "runtimeClassName": "gvisor",
        },
    }


@check("CTL-005")
def cannot_create_sandbox_pods(ctx: Context) -> Verdict:
    who, p = identity(ctx), plane(ctx)
    name = ctx.token()
    attempts = [
        attempt(
            "probe identity creates a pod labelled as a sandbox",
            lambda: who.core.create_namespaced_pod(
                p.sandbox_namespace,
                _fake_pod(p.sandbox_namespace, name, ctx.settings.image),
                dry_run=DRY,
            ),
        ),
        attempt(
            "the suite's own identity (allowed to create pods) does the same",
            lambda: ctx.kube.core.create_namespaced_pod(
                p.sandbox_namespace,
                _fake_pod(p.sandbox_namespace, name, ctx.settings.image),
                dry_run=DRY,
            ),
        ),
    ]
    return judge(attempts)


@check("CTL-006")
def cannot_change_sandbox_pods(ctx: Context) -> Verdict:
    who, p = identity(ctx), plane(ctx)
    handle = ctx.sandbox()
    if not handle.pod:
        raise CannotRun("the backend names no pod for its sandbox")
    pod, ns = handle.pod, p.sandbox_namespace
    relabel = {"metadata": {"labels": {"openblox.sh/profile": "tampered"}}}
    debug = {
        "spec": {
            "ephemeralContainers": [
                {
                    "name": "debugger",
                    "image": ctx.settings.image,
                    "securityContext": RESTRICTED,
                    "targetContainerName": CONTAINER_NAME,
                }
            ]
        }
    }
    attempts = []
    for who_name, api in (("probe identity", who), ("the suite's own identity", ctx.kube)):
        attempts += _pod_changes(api, who_name, pod=pod, ns=ns, relabel=relabel, debug=debug)
    return judge(attempts)


def _pod_changes(
    api: Kube, who: str, *, pod: str, ns: str, relabel: dict[str, Any], debug: dict[str, Any]
) -> list[tuple[str, bool, str]]:
    core = api.core
    return [
        attempt(
            f"{who}: patch labels",
            lambda: core.patch_namespaced_pod(pod, ns, relabel, dry_run=DRY),
        ),
        attempt(f"{who}: delete", lambda: core.delete_namespaced_pod(pod, ns, dry_run=DRY)),
        attempt(
            f"{who}: add an ephemeral container",
            lambda: core.patch_namespaced_pod_ephemeralcontainers(pod, ns, debug, dry_run=DRY),
        ),
    ]


@check("CTL-007")
def no_exec_across_namespaces(ctx: Context) -> Verdict:
    who, p = identity(ctx), plane(ctx)
    own = ctx.sandbox()
    if not own.pod:
        raise CannotRun("the backend names no pod for its sandbox")
    control = who.exec(p.sandbox_namespace, own.pod, CONTAINER_NAME, ["true"], timeout=30)
    if control.exit_code != 0:
        raise CannotRun(
            f"the probe identity cannot exec into its own namespace's sandbox either "
            f"({control.error or control.exit_code}), so a refusal would prove nothing"
        )
    other = ctx.waiting(lambda: p.create_in(p.other_namespace, ctx.profile))
    try:
        if not other.pod:
            raise CannotRun("the backend names no pod for its sandbox")
        outcome = who.exec(p.other_namespace, other.pod, CONTAINER_NAME, ["id"], timeout=30)
        exec_attempt = (
            f"exec into {p.other_namespace}/{other.pod}",
            outcome.exit_code is None and "(403)" in (outcome.error or ""),
            (outcome.error or f"ran, exit {outcome.exit_code}: {outcome.stdout[:60]!r}")[:200],
        )
        attempts = [
            exec_attempt,
            attempt(
                f"get Sandbox {p.other_namespace}/{other.name}",
                lambda: who.custom.get_namespaced_custom_object(
                    GROUP, VERSION, p.other_namespace, PLURAL, other.name
                ),
            ),
            attempt(
                f"delete Sandbox {p.other_namespace}/{other.name}",
                lambda: who.custom.delete_namespaced_custom_object(
                    GROUP, VERSION, p.other_namespace, PLURAL, other.name, dry_run=DRY
                ),
            ),
        ]
    finally:
        ctx.backend.delete(other)
    return judge(attempts, "control: exec into its own namespace's sandbox works; ")


def _watch_sandbox(
    kube: Kube, namespace: str, name: str, seconds: float
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The Ready condition once it settles (or at the end), and the pods made for it."""
    deadline = time.monotonic() + seconds
    condition: dict[str, Any] = {}
    while time.monotonic() < deadline:
        body = kube.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        for c in (body.get("status") or {}).get("conditions") or []:
            if c.get("type") == "Ready":
                condition = c
        if condition.get("status") == "True" or condition.get("reason") not in (
            None,
            "PodPending",
            "PodNotCreated",
            "RuntimeNotChecked",
            "ProfileNotResolved",
        ):
            break
        time.sleep(1)
    pods = [
        kube.plain(item)
        for item in kube.core.list_namespaced_pod(
            namespace, label_selector=f"{LABEL_SANDBOX}={name}"
        ).items
    ]
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
        kube.custom.create_namespaced_custom_object(
            GROUP, VERSION, p.sandbox_namespace, PLURAL, _sandbox(name, {"profile": profile})
        )
    except ApiException as error:
        raise CannotRun(
            f"could not create a Sandbox with {profile}: {message_of(error)}"
        ) from error
    try:
        condition, pods = _watch_sandbox(kube, p.sandbox_namespace, name, 60)
    finally:
        kube.custom.delete_namespaced_custom_object(
            GROUP, VERSION, p.sandbox_namespace, PLURAL, name
        )
    reason, message = condition.get("reason"), str(condition.get("message", ""))[:200]
    running = [x for x in pods if (x.get("status") or {}).get("phase") == "Running"]
    text = f"profile {profile}: Ready {condition.get('status')} {reason}: {message}; " + _pods_text(
        pods
    )
    if condition.get("status") == "True" or running:
        return fail(f"it runs: {text}")
    if reason in ("ProfileNotFound", "ProfileNotAllowed", "ProfileInvalid"):
        raise CannotRun(f"{profile} cannot be used here for another reason: {text}")
    if reason != "RuntimeUnavailable":
        return fail(f"not refused as runtime-unavailable within 60s: {text}")
    return ok(text)


@check("CTL-009")
def cannot_lengthen_life(ctx: Context) -> Verdict:
    p = plane(ctx)
    who = identity(ctx)
    name = ctx.token()
    spec = {"profile": ctx.profile, "maxAgeSeconds": 10**9, "idleTimeoutSeconds": 10**9}
    try:
        who.custom.create_namespaced_custom_object(
            GROUP, VERSION, p.sandbox_namespace, PLURAL, _sandbox(name, spec)
        )
    except ApiException as error:
        return ok(f"refused at the door: {message_of(error)[:200]}")
    try:
        condition, pods = _watch_sandbox(ctx.kube, p.sandbox_namespace, name, 60)
    finally:
        ctx.kube.custom.delete_namespaced_custom_object(
            GROUP, VERSION, p.sandbox_namespace, PLURAL, name
        )
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
                lambda: who.custom.patch_namespaced_custom_object_status(
                    GROUP, VERSION, p.sandbox_namespace, PLURAL, handle.name, forged, dry_run=DRY
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
        stored = who.custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name, forged, dry_run=DRY
        )
    except ApiException as error:
        return what, True, message_of(error)[:200]
    boundary = (stored.get("status") or {}).get("boundary")
    if boundary == "kata":
        return what, False, "the forged status was stored"
    return what, True, f"accepted, status ignored (boundary stays {boundary})"
