"""Which isolation boundary a pod really runs behind, judged from what it reports.

The operator reads the kernel from inside the pod rather than trusting
`runtimeClassName`: a misconfigured node could map the handler name to runc.
"""

from __future__ import annotations

from openblox.models.profile import Boundary

# The Sentry names itself in its release string, /proc/version and its boot log.
GVISOR_MARKER = "gvisor"


def classify_boundary(
    guest_kernel_release: str,
    guest_kernel_log: str,
    node_kernel_release: str,
    guest_proc_version: str = "",
) -> Boundary | None:
    """What the pod runs behind, or None when the evidence is incomplete.

    none: the guest sees the node's own kernel. gvisor: the kernel (its release,
    /proc/version or its log) is the Sentry's. kata: another, real kernel (a release
    and a kernel log, neither gVisor's); /proc/version alone never makes one, so a
    gVisor whose log could not be read is not taken for a VM.
    A probe that came back short (a loaded node, a cut stream) proves nothing either
    way, and deciding on it would either trust the runtime's name or delete a good pod.
    """
    release = guest_kernel_release.strip()
    if not release:
        return None
    if release == node_kernel_release.strip():
        return "none"
    if GVISOR_MARKER in f"{release}\n{guest_proc_version}\n{guest_kernel_log}".lower():
        return "gvisor"
    if not guest_kernel_log.strip():
        return None
    return "kata"


def kernel_log_decides(
    guest_kernel_release: str, node_kernel_release: str, guest_proc_version: str = ""
) -> bool:
    """Whether only the guest's kernel log can settle the verdict: its release is neither
    the node's nor gVisor's, and neither is /proc/version. Reading the log starts a second
    program in the pod (`dmesg`), so the probe pays for it only then."""
    return bool(guest_kernel_release.strip()) and (
        classify_boundary(guest_kernel_release, "", node_kernel_release, guest_proc_version) is None
    )
