"""Probe a running sandbox pod for the boundary it actually runs behind."""

from __future__ import annotations

import logging
import time

from openblox.client.exec_stream import STDOUT, Connection, ExecSocket
from openblox.controller.kube import Kube
from openblox.models.boundary import classify_boundary
from openblox.models.profile import Boundary
from openblox.names import CONTAINER_NAME

log = logging.getLogger(__name__)

# uname and the kernel log are read before any caller's code runs in the pod (the
# client waits for Ready, which waits for this probe), so the guest cannot stage them.
# dmesg needs syslog(2), which the RuntimeDefault seccomp profile refuses; /proc/version
# is readable everywhere.
_PROBE = ["/bin/sh", "-c", "uname -r; echo ---; cat /proc/version; dmesg 2>/dev/null"]
_PROBE_SECONDS = 30.0


def probe_boundary(
    kube: Kube, namespace: str, pod: str, node_kernel_release: str
) -> Boundary | None:
    """The boundary seen inside the pod, or None when the probe was inconclusive."""
    output = _exec(kube, namespace, pod)
    release, _, kernel_log = output.partition("---")
    boundary = classify_boundary(release, kernel_log, node_kernel_release)
    if boundary is None:
        log.warning("boundary probe of %s/%s was inconclusive; will retry", namespace, pod)
    else:
        log.info("pod %s/%s runs behind %s (kernel %s)", namespace, pod, boundary, release.strip())
    return boundary


def _exec(kube: Kube, namespace: str, pod: str) -> str:
    """The probe's stdout, over the same framed exec stream the client uses.

    (The kubernetes package's `stream()` swaps the transport of the shared ApiClient
    while it runs, which breaks every other thread's calls, and it loses output when a
    command ends quickly.)
    """
    connection = Connection.from_configuration(kube.core.api_client.configuration)
    socket = ExecSocket(
        connection, namespace, pod, CONTAINER_NAME, _PROBE, stdin=False, timeout=_PROBE_SECONDS
    )
    output = bytearray()
    try:
        for frame in socket.frames(time.monotonic() + _PROBE_SECONDS):
            if frame.channel == STDOUT:
                output += frame.data
    finally:
        socket.close()
    return output.decode("utf-8", "replace")
