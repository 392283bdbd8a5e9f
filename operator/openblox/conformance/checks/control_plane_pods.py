"""Control plane, pods: the client identity can neither make a sandbox pod, nor change one
(relabel, weaken, attach a debug container), nor exec into a sandbox of another namespace.

Helpers and the identity are shared with control_plane.py.
"""

from __future__ import annotations

from typing import Any

from openblox.conformance.checks.control_plane import (
    DRY,
    attempt,
    identity,
    judge,
    plane,
)
from openblox.conformance.checks.registry import check
from openblox.conformance.context import CannotRun, Context, Verdict
from openblox.conformance.kube import Kube
from openblox.names import (
    CONTAINER_NAME,
    GROUP,
    LABEL_PROFILE,
    LABEL_SANDBOX,
    PLURAL,
    RUNTIME_CLASS_GVISOR,
    VERSION,
)

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
            "runtimeClassName": RUNTIME_CLASS_GVISOR,
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
    relabel = {"metadata": {"labels": {LABEL_PROFILE: "tampered"}}}
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
