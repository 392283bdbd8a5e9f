"""kopf registrations, and nothing else: every body lives in the modules they call.

Sandboxes are handled with raw watch events (`on.event`), not kopf's create/update
handlers: the reconcile is level-based, so it needs no diff, no progress annotations
and no finalizers; the initial listing after a restart is the resume.
"""

from __future__ import annotations

import logging
import random
from typing import Any

import kopf

from openblox.controller.runtime import Runtime
from openblox.names import GROUP, LABEL_SANDBOX, PLURAL, VERSION

log = logging.getLogger(__name__)


@kopf.on.startup()
def start(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    settings.peering.clusterwide = True
    settings.peering.mandatory = True
    # Distinct priorities make exactly one replica active; equal ones would all act.
    settings.peering.priority = random.randint(1, 2**31 - 1)
    settings.posting.enabled = False
    settings.execution.max_workers = 16
    settings.watching.server_timeout = 300
    runtime = Runtime.build()
    runtime.start()
    memo["runtime"] = runtime


@kopf.on.cleanup()
def stop(memo: kopf.Memo, **_: Any) -> None:
    runtime: Runtime | None = memo.get("runtime")
    if runtime:
        runtime.shutdown()


@kopf.on.event(GROUP, VERSION, PLURAL)
def sandbox_changed(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    runtime: Runtime = memo["runtime"]
    metadata = body["metadata"]
    if event["type"] == "DELETED":
        runtime.cache.remove(metadata["namespace"], metadata["name"])
        runtime.reconciler.forget(metadata["uid"])
        return
    runtime.cache.upsert(body)
    runtime.reconciler.reconcile(body, "sandbox")


@kopf.on.event("", "v1", "pods", labels={LABEL_SANDBOX: kopf.PRESENT})
def sandbox_pod_changed(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    runtime: Runtime = memo["runtime"]
    owner = runtime.cache.body(
        body["metadata"]["namespace"], body["metadata"]["labels"][LABEL_SANDBOX]
    )
    if owner is not None:
        runtime.reconciler.reconcile(owner, "pod")
