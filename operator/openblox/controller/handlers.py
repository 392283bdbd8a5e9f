"""kopf registrations, and nothing else: every body lives in the modules they call.

Sandboxes are handled with raw watch events (`on.event`), not kopf's create/update
handlers: the reconcile is level-based, so it needs no diff, no progress annotations
and no finalizers; the initial listing after a restart is the resume. The other watches
(pods, Namespaces, RuntimeClasses, the NetworkPolicy) keep `Watched` current, so a
reconcile reads nothing from the API server, and trigger reconciles when what a Sandbox
waits for changes. A handler reconciles nothing itself: it adds the Sandbox to the work
queue (`work_queue.py`), whose workers reconcile it. Every replica watches; only the
Lease holder reconciles.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from openblox.controller.kube import Kube
from openblox.controller.runtime import Runtime
from openblox.names import (
    GROUP,
    LABEL_MANAGED_BY,
    LABEL_POOL,
    LABEL_SANDBOX,
    MANAGED_BY,
    NETWORK_POLICY_NAME,
    PLURAL,
    VERSION,
)

log = logging.getLogger(__name__)


@kopf.on.startup()
def start(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    # No kopf peering (`standalone`, see __main__): it pauses a standby's watches, so its
    # caches go cold. Every replica watches; the Lease (`Election`) decides who writes.
    settings.posting.enabled = False
    settings.watching.server_timeout = 300
    # Memory follows what the caches keep more than the size of a burst (ADR 0022): the
    # first listing comes in pages, not as one body of every sandbox pod; and the
    # library's per-object worker, which holds its last event's whole body, goes after
    # half a second without events instead of five. The handlers below are coroutines
    # that only update caches and queue reconciles, so no event waits for a thread.
    settings.watching.chunk_size = 500
    settings.queueing.idle_timeout = 0.5
    # Only raw event handlers are registered, so kopf writes no last-handled-configuration
    # or progress annotations and adds no finalizers: there is nothing to switch off.
    runtime = Runtime.build()
    runtime.start()
    memo["runtime"] = runtime


@kopf.on.login()
def login(**_: Any) -> kopf.ConnectionInfo:
    """kopf's own ServiceAccount login dials kubernetes.default.svc, which needs cluster
    DNS; use the same credentials as the operator's client (KUBERNETES_SERVICE_HOST).
    kopf calls this again when the API server answers 401 (a rotated token)."""
    kube = Kube.connect()
    credentials = kube.credentials
    return kopf.ConnectionInfo(
        server=credentials.server,
        ca_path=credentials.ca_file,
        insecure=credentials.insecure,
        token=kube.bearer_token(),
        scheme="Bearer" if kube.bearer_token() else None,
        certificate_path=credentials.cert_file,
        private_key_path=credentials.key_file,
    )


@kopf.on.cleanup()
def stop(memo: kopf.Memo, **_: Any) -> None:
    runtime: Runtime | None = memo.get("runtime")
    if runtime:
        runtime.shutdown()


@kopf.on.event(GROUP, VERSION, PLURAL)
async def sandbox_changed(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    runtime: Runtime = memo["runtime"]
    metadata = body["metadata"]
    if event["type"] == "DELETED":
        runtime.cache.remove(metadata["namespace"], metadata["name"])
        runtime.reconciler.forget(metadata["uid"], metadata["namespace"], metadata["name"])
        return
    sandbox = runtime.cache.upsert(body)
    # A standby only keeps its cache; the holder reconciles everything when it takes over.
    if sandbox is not None and runtime.election.leading:
        runtime.queue.add((sandbox.namespace, sandbox.name), "sandbox")


@kopf.on.event("", "v1", "pods", labels={LABEL_SANDBOX: kopf.PRESENT})
async def sandbox_pod_changed(
    event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any
) -> None:
    runtime: Runtime = memo["runtime"]
    metadata = body["metadata"]
    if event["type"] == "DELETED":
        runtime.watched.pod_gone(metadata["namespace"], metadata["name"], metadata.get("uid"))
        runtime.boundaries.forget(metadata.get("uid", ""))
    else:
        runtime.watched.pod_seen(body)
    if (metadata.get("labels") or {}).get(LABEL_POOL):
        runtime.pool_keeper.nudge()  # a pool pod started, ended or went: refill, probe
        return
    owner = runtime.cache.get(metadata["namespace"], metadata["labels"][LABEL_SANDBOX])
    if owner is not None and runtime.election.leading:
        runtime.queue.add((owner.namespace, owner.name), "pod")


@kopf.on.event("", "v1", "namespaces")
async def namespace_changed(
    event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any
) -> None:
    runtime: Runtime = memo["runtime"]
    name = body["metadata"]["name"]
    if event["type"] == "DELETED":
        runtime.watched.namespace_gone(name)
    elif runtime.watched.namespace_seen(name, body["metadata"].get("labels")):
        # Its Sandboxes' profiles are allowed by these labels, and the reconcile puts
        # back Pod Security `restricted` if someone took it off: reconcile them all.
        runtime.resyncs.request(name)


@kopf.on.event("node.k8s.io", "v1", "runtimeclasses")
async def runtime_class_changed(
    event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any
) -> None:
    runtime: Runtime = memo["runtime"]
    name = body["metadata"]["name"]
    if event["type"] == "DELETED":
        runtime.watched.runtime_class_gone(name)
    elif runtime.watched.runtime_class_seen(name, str(body.get("handler") or "")):
        runtime.resyncs.request()  # RuntimeUnavailable ones may now run


@kopf.on.event("networking.k8s.io", "v1", "networkpolicies", labels={LABEL_MANAGED_BY: MANAGED_BY})
async def network_policy_changed(
    event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any
) -> None:
    runtime: Runtime = memo["runtime"]
    metadata = body["metadata"]
    if metadata["name"] != NETWORK_POLICY_NAME:
        return
    if event["type"] == "DELETED":
        runtime.watched.policy_gone(metadata["namespace"])
        # Made again before anything else happens there.
        runtime.resyncs.request(metadata["namespace"])
    else:
        runtime.watched.policy_seen(metadata["namespace"])
