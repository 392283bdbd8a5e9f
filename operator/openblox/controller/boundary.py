"""Probe a running sandbox pod for the boundary it actually runs behind."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from openblox.controller.kube import Kube
from openblox.models.boundary import classify_boundary
from openblox.models.node_preparation import (
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
# operator until then), so the guest cannot stage them. dmesg needs syslog(2), which the
# RuntimeDefault seccomp profile refuses; /proc/version is readable everywhere, and its
# third word is what `uname -r` prints. Shell builtins read it: the probe runs under the
# profile's CPU limit, where every program started in a new gVisor sandbox costs hundreds
# of milliseconds, so it starts only sh, and dmesg only when the kernel log could change
# the verdict: a release or /proc/version that names gVisor decides it alone
# (models/boundary.py), whatever the log says. The same exec reads what the node must
# provide (models/node_preparation.py): the mounts, the process cap and the interfaces.
def probe_script(version_file: str = "/proc/version", proc: str = "/proc") -> str:
    def lines(source: str, pattern: str = "*") -> str:
        return f'while read -r l; do case "$l" in {pattern}) echo "$l";; esac; done <{source}; '

    return (
        f'read -r line <{version_file}; set -- $line; echo "$3"; echo ---; echo "$line";'
        " echo ---; "
        + lines(f"{proc}/self/mountinfo")
        + "echo ---; "
        + lines(f"{proc}/self/limits", '"Max processes"*')
        + "echo ---; "
        + lines(f"{proc}/net/dev")
        + 'echo ---; case "$line" in *[gG][vV][iI][sS][oO][rR]*) ;; *) dmesg 2>/dev/null;; esac'
    )


_PROBE = ["/bin/sh", "-c", probe_script()]
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
        output = _exec(kube, namespace, pod)
    except ExecOutputTooLarge:
        log.warning(
            "boundary probe of %s/%s printed more than %d bytes; undecided, will retry",
            namespace,
            pod,
            PROBE_OUTPUT_BYTES,
        )
        return None
    report = split_probe_output(output)
    boundary = classify_boundary(
        report.release, report.kernel_log, node_kernel_release, report.version
    )
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
