"""Which isolation boundary a pod really runs behind, judged from what it reports.

The operator reads the kernel from inside the pod rather than trusting
`runtimeClassName`: a misconfigured node could map the handler name to runc.
"""

from __future__ import annotations

from openblox.models.profile import Boundary

GVISOR_MARKER = "gVisor"


def classify_boundary(
    guest_kernel_release: str, guest_kernel_log: str, node_kernel_release: str
) -> Boundary:
    """gvisor if the guest's kernel log is the Sentry's; kata for any other kernel than
    the node's (a separate guest kernel); none when the guest shares the node's kernel."""
    release = guest_kernel_release.strip()
    if release == node_kernel_release.strip():
        return "none"
    if GVISOR_MARKER in guest_kernel_log:
        return "gvisor"
    return "kata"
