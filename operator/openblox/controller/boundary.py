"""Probe a running sandbox pod for the boundary it actually runs behind."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from openblox.controller.kube import Kube
from openblox.models.boundary import classify_boundary, kernel_log_decides
from openblox.models.node_preparation import (
    PROBED_FILES,
    NodeRequirements,
    split_probe_output,
    unmet_requirements,
)
from openblox.models.profile import Boundary
from openblox.names import CONTAINER_NAME
from openblox.transport import ExecOutput, ExecOutputTooLarge, ExecSocket

log = logging.getLogger(__name__)


# The kernel's release and log are read before any caller's code runs in the pod (the
# client waits for Ready, which waits for this probe; the pod is sealed to all but the
# operator until then), so the guest cannot stage them. The probe is one program, `cat`,
# which reads /proc/version (its third word is what `uname -r` prints) and what the node
# must provide (models/node_preparation.py): the mounts, the process cap and the
# interfaces. Under the profile's CPU limit every program started in a new gVisor sandbox
# costs about 100 ms, and a shell reading the same files with `read` cost four times that,
# a byte at a time. dmesg (syslog(2), which the RuntimeDefault seccomp profile refuses, so
# its absence is no verdict) runs in a second exec only when the kernel log could change
# the verdict: a release or /proc/version that names gVisor or the node decides it alone.
PROBE_COMMAND = ("cat", *PROBED_FILES)
KERNEL_LOG_COMMAND = ("dmesg",)
_PROBE_SECONDS = 30.0
PROBE_OUTPUT_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class ProbeVerdict:
    """The boundary the pod runs behind, and what its node failed to give it (empty: the
    node is prepared, or the profile claims no boundary and is owed nothing)."""

    boundary: Boundary
    unmet: tuple[str, ...] = ()


def probe_boundary(
    kube: Kube,
    namespace: str,
    pod: str,
    node_kernel_release: str,
    requirements: NodeRequirements | None = None,
) -> ProbeVerdict | None:
    """What the probe saw in the pod, or None when it was inconclusive."""
    try:
        output = _exec(kube, namespace, pod, PROBE_COMMAND)
        report = split_probe_output(output.text, exited_cleanly=output.exit_code == 0)
        kernel_log = ""
        if kernel_log_decides(report.release, node_kernel_release, report.version):
            kernel_log = _exec(kube, namespace, pod, KERNEL_LOG_COMMAND).text
    except ExecOutputTooLarge:
        log.warning(
            "boundary probe of %s/%s printed more than %d bytes; undecided, will retry",
            namespace,
            pod,
            PROBE_OUTPUT_BYTES,
        )
        return None
    boundary = classify_boundary(report.release, kernel_log, node_kernel_release, report.version)
    if boundary is None:
        log.warning("boundary probe of %s/%s was inconclusive; will retry", namespace, pod)
        return None
    log.info("pod %s/%s runs behind %s (kernel %s)", namespace, pod, boundary, report.release)
    unmet = unmet_requirements(report, requirements) if requirements is not None else ()
    if unmet:
        log.warning(
            "pod %s/%s lacks what its node must give it: %s", namespace, pod, "; ".join(unmet)
        )
    return ProbeVerdict(boundary, unmet)


@dataclass(frozen=True, slots=True)
class _Printed:
    text: str
    exit_code: int | None


def _exec(kube: Kube, namespace: str, pod: str, command: tuple[str, ...]) -> _Printed:
    """What the command printed on stdout, over the transport's pods/exec; the stream ends
    when the server closes it after the command. A probe past its deadline raises
    (TimeoutError)."""
    kube.guard_write()  # an exec is a create (pods/exec): only the Lease holder runs one
    socket = ExecSocket(
        kube.session,
        namespace,
        pod,
        CONTAINER_NAME,
        list(command),
        stdin=False,
        stderr=False,
        timeout=_PROBE_SECONDS,
    )
    # Bounded: what comes back is read from the pod. The kernel's log is the most the
    # probe reads (a few hundred KiB on a busy host kernel); past the bound the stream
    # is closed and the probe decides nothing (ExecOutputTooLarge).
    output = socket.read_to_end(
        time.monotonic() + _PROBE_SECONDS, ExecOutput.bounded(PROBE_OUTPUT_BYTES, 0)
    )
    return _Printed(output.stdout.decode("utf-8", "replace"), output.exit_code)
