"""Probe a running sandbox pod for the boundary it actually runs behind."""

from __future__ import annotations

import logging
import time

from openblox.controller.kube import Kube
from openblox.models.boundary import classify_boundary
from openblox.models.profile import Boundary
from openblox.names import CONTAINER_NAME
from openblox.transport import ExecOutput, ExecOutputTooLarge, ExecSocket

log = logging.getLogger(__name__)


# The kernel's release and log are read before any caller's code runs in the pod (the
# client waits for Ready, which waits for this probe), so the guest cannot stage them.
# dmesg needs syslog(2), which the RuntimeDefault seccomp profile refuses; /proc/version
# is readable everywhere, and its third word is what `uname -r` prints. Shell builtins
# read it: the probe runs under the profile's CPU limit, where every program started in
# a new gVisor sandbox costs hundreds of milliseconds, so it starts only sh, and dmesg
# only when the kernel log could change the verdict: a release or /proc/version that
# names gVisor decides it alone (models/boundary.py), whatever the log says.
def probe_script(version_file: str = "/proc/version") -> str:
    return (
        f'read -r line <{version_file}; set -- $line; echo "$3"; echo ---; echo "$line";'
        ' echo ---; case "$line" in *[gG][vV][iI][sS][oO][rR]*) ;; *) dmesg 2>/dev/null;; esac'
    )


_PROBE = ["/bin/sh", "-c", probe_script()]
_PROBE_SECONDS = 30.0
PROBE_OUTPUT_BYTES = 1 << 20


def probe_boundary(
    kube: Kube, namespace: str, pod: str, node_kernel_release: str
) -> Boundary | None:
    """The boundary seen inside the pod, or None when the probe was inconclusive."""
    try:
        output = _exec(kube, namespace, pod)
    except ExecOutputTooLarge:
        log.warning(
            "boundary probe of %s/%s printed more than %d bytes; undecided, will retry",
            namespace,
            pod,
            PROBE_OUTPUT_BYTES,
        )
        return None
    release, _, rest = output.partition("---")
    version, _, kernel_log = rest.partition("---")
    boundary = classify_boundary(release, kernel_log, node_kernel_release, version)
    if boundary is None:
        log.warning("boundary probe of %s/%s was inconclusive; will retry", namespace, pod)
    else:
        log.info("pod %s/%s runs behind %s (kernel %s)", namespace, pod, boundary, release.strip())
    return boundary


def _exec(kube: Kube, namespace: str, pod: str) -> str:
    """The probe's stdout, over the transport's pods/exec; the stream ends when the server
    closes it after the command. A probe past its deadline raises (TimeoutError)."""
    kube.guard_write()  # an exec is a create (pods/exec): only the Lease holder runs one
    socket = ExecSocket(
        kube.session,
        namespace,
        pod,
        CONTAINER_NAME,
        _PROBE,
        stdin=False,
        stderr=False,
        timeout=_PROBE_SECONDS,
    )
    # Bounded: what comes back is read from the pod. The kernel's log is the most the
    # probe prints (a few hundred KiB on a busy host kernel); past the bound the stream
    # is closed and the probe decides nothing (ExecOutputTooLarge).
    output = socket.read_to_end(
        time.monotonic() + _PROBE_SECONDS, ExecOutput.bounded(PROBE_OUTPUT_BYTES, 0)
    )
    return output.stdout.decode("utf-8", "replace")
