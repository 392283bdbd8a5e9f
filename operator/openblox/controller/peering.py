"""kopf's peering object: replicas meet there, and kopf handles nothing while it is missing.

It is created at start and kept: if it disappears (it has been seen to vanish when the
CRD's storage was re-initialised just after install), it is made again within seconds
rather than leaving the operator paused without a word.
"""

from __future__ import annotations

import logging
import threading
import time

from openblox.controller.kube import Kube, is_conflict, is_not_found, path

log = logging.getLogger(__name__)

PEERING_NAME = "openblox-operator"
GROUP, VERSION, PLURAL = "kopf.dev", "v1", "clusterkopfpeerings"
KEEP_INTERVAL_SECONDS = 5.0


def peering_exists(kube: Kube, name: str = PEERING_NAME) -> bool:
    try:
        kube.get(path(group=GROUP, version=VERSION, plural=PLURAL, name=name))
    except Exception as error:
        if is_not_found(error):
            return False
        raise
    return True


def create_peering(kube: Kube, name: str = PEERING_NAME) -> None:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ClusterKopfPeering",
        "metadata": {"name": name},
    }
    try:
        kube.post(path(group=GROUP, version=VERSION, plural=PLURAL), body)
    except Exception as error:
        if not is_conflict(error):
            raise


def ensure_peering(kube: Kube, name: str = PEERING_NAME, timeout: float = 120.0) -> None:
    """Create the object (the CRD may have been applied a moment ago) and read it back."""
    deadline = time.monotonic() + timeout
    while not peering_exists(kube, name):
        try:
            create_peering(kube, name)
        except Exception as error:
            if time.monotonic() > deadline:
                raise RuntimeError(f"could not create the peering object {name}") from error
            log.info("peering object not created yet: %s", error)
            time.sleep(2)


def keep_peering(kube: Kube, stop: threading.Event, name: str = PEERING_NAME) -> None:
    while not stop.wait(KEEP_INTERVAL_SECONDS):
        try:
            if not peering_exists(kube, name):
                log.warning("peering object %s is missing; creating it again", name)
                create_peering(kube, name)
        except Exception:
            log.exception("could not check the peering object")
