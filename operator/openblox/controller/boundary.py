"""Probe a running sandbox pod for the boundary it actually runs behind."""

from __future__ import annotations

import logging

from kubernetes import client
from kubernetes.stream import stream

from openblox.controller.kube import Kube
from openblox.models.boundary import classify_boundary
from openblox.models.profile import Boundary
from openblox.names import CONTAINER_NAME

log = logging.getLogger(__name__)

# uname and the kernel log are read before any caller's code runs in the pod (the
# client waits for Ready, which waits for this probe), so the guest cannot stage them.
_PROBE = ["/bin/sh", "-c", "uname -r; echo ---; dmesg 2>/dev/null"]


def probe_boundary(
    kube: Kube, namespace: str, pod: str, node_kernel_release: str
) -> Boundary | None:
    # stream() swaps call_api on the ApiClient it is handed for as long as it runs, so
    # every other thread's calls on a shared client would go over a websocket (and two
    # overlapping probes can leave it swapped for good). A private client each time.
    with client.ApiClient(kube.core.api_client.configuration) as api:
        output: str = _exec(client.CoreV1Api(api), namespace, pod)
    release, _, kernel_log = output.partition("---")
    boundary = classify_boundary(release, kernel_log, node_kernel_release)
    log.info("pod %s/%s runs behind %s (kernel %s)", namespace, pod, boundary, release.strip())
    return boundary


def _exec(core: client.CoreV1Api, namespace: str, pod: str) -> str:
    output: str = stream(
        core.connect_get_namespaced_pod_exec,
        pod,
        namespace,
        container=CONTAINER_NAME,
        command=_PROBE,
        stderr=True,
        stdin=False,
        stdout=True,
        tty=False,
        _request_timeout=30,
    )
    return output
