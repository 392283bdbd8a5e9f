"""Control plane, pods: the client identity can neither make a sandbox pod, nor change one
(relabel, weaken, attach a debug container), nor exec into a sandbox of another namespace.

Helpers and the identity are shared with control_plane.py.
"""

from __future__ import annotations

from typing import Any

from openblox.client.cluster import sandboxes_path
from openblox.conformance.backend import Handle
from openblox.conformance.checks.control_plane import (
    attempt,
    dry_run,
    identity,
    judge,
    plane,
)
from openblox.conformance.checks.registry import check
from openblox.conformance.cluster_api import Kube
from openblox.conformance.context import CannotRun, Context, Verdict
from openblox.names import (
    CONTAINER_NAME,
    LABEL_PROFILE,
    LABEL_SANDBOX,
    RUNTIME_CLASS_GVISOR,
)
from openblox.transport import STRATEGIC_MERGE_PATCH, path

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
            lambda: dry_run(
                who,
                "POST",
                path(plural="pods", namespace=p.sandbox_namespace),
                _fake_pod(p.sandbox_namespace, name, ctx.settings.image),
            ),
        ),
        attempt(
            "the suite's own identity (allowed to create pods) does the same",
            lambda: dry_run(
                ctx.kube,
                "POST",
                path(plural="pods", namespace=p.sandbox_namespace),
                _fake_pod(p.sandbox_namespace, name, ctx.settings.image),
            ),
        ),
    ]
    return judge(attempts)


def _pod_of(handle: Handle) -> str:
    """The sandbox's pod, which these properties aim at; a backend that names none
    cannot be judged by them."""
    if not handle.pod:
        raise CannotRun("the backend names no pod for its sandbox")
    return handle.pod


@check("CTL-006")
def cannot_change_sandbox_pods(ctx: Context) -> Verdict:
    who, p = identity(ctx), plane(ctx)
    pod, ns = _pod_of(ctx.sandbox()), p.sandbox_namespace
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
    where = path(plural="pods", namespace=ns, name=pod)
    return [
        attempt(
            f"{who}: patch labels",
            lambda: dry_run(api, "PATCH", where, relabel, STRATEGIC_MERGE_PATCH),
        ),
        attempt(f"{who}: delete", lambda: dry_run(api, "DELETE", where)),
        attempt(
            f"{who}: add an ephemeral container",
            lambda: dry_run(
                api, "PATCH", f"{where}/ephemeralcontainers", debug, STRATEGIC_MERGE_PATCH
            ),
        ),
    ]


@check("CTL-007")
def no_exec_across_namespaces(ctx: Context) -> Verdict:
    who, p = identity(ctx), plane(ctx)
    own_pod = _pod_of(ctx.sandbox())
    control = who.exec(p.sandbox_namespace, own_pod, CONTAINER_NAME, ["true"], timeout=30)
    if control.exit_code != 0:
        raise CannotRun(
            f"the probe identity cannot exec into its own namespace's sandbox either "
            f"({control.error or control.exit_code}), so a refusal would prove nothing"
        )
    other = ctx.waiting(lambda: p.create_in(p.other_namespace, ctx.profile))
    try:
        other_pod = _pod_of(other)
        outcome = who.exec(p.other_namespace, other_pod, CONTAINER_NAME, ["id"], timeout=30)
        exec_attempt = (
            f"exec into {p.other_namespace}/{other_pod}",
            outcome.exit_code is None and "(403)" in (outcome.error or ""),
            (outcome.error or f"ran, exit {outcome.exit_code}: {outcome.stdout[:60]!r}")[:200],
        )
        attempts = [
            exec_attempt,
            attempt(
                f"get Sandbox {p.other_namespace}/{other.name}",
                lambda: who.api.get(sandboxes_path(p.other_namespace, other.name)),
            ),
            attempt(
                f"delete Sandbox {p.other_namespace}/{other.name}",
                lambda: dry_run(who, "DELETE", sandboxes_path(p.other_namespace, other.name)),
            ),
        ]
    finally:
        ctx.backend.delete(other)
    return judge(attempts, "control: exec into its own namespace's sandbox works; ")
