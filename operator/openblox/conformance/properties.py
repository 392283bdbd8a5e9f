"""The registry: every property the suite probes, with a stable ID and one line of why.

IDs never change meaning and are never reused; THREAT_MODEL.md cites them next to each
claim. A property belongs to one category (its tier). A property that needs an optional
backend capability names it; a backend without it reports the property *unsupported*
with its reason. Each property's check lives in ``openblox.conformance.checks``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from openblox.conformance.backend import Capability


class Category(StrEnum):
    BOUNDARY = "Boundary"
    NETWORK = "Network"
    IDENTITY = "Identity and privilege"
    FILESYSTEM = "Filesystem"
    RESOURCES = "Resources"
    LIFETIME = "Time and lifetime"
    CONTROL_PLANE = "Control plane"


DEFAULT_DEADLINE_SECONDS = 90.0


@dataclass(frozen=True)
class Property:
    id: str
    category: Category
    title: str
    rationale: str
    requires: Capability | None = None
    deadline_seconds: float = DEFAULT_DEADLINE_SECONDS
    """Past this the property fails as hung; the run goes on."""


def _p(  # noqa: PLR0917  (positional on purpose: one table row per property)
    id_: str,
    category: Category,
    title: str,
    rationale: str,
    requires: Capability | None = None,
    deadline: float = DEFAULT_DEADLINE_SECONDS,
) -> Property:
    return Property(id_, category, title, rationale, requires, deadline)


B, N, I, F, R, T, C = (  # noqa: E741  (short names keep the table readable)
    Category.BOUNDARY,
    Category.NETWORK,
    Category.IDENTITY,
    Category.FILESYSTEM,
    Category.RESOURCES,
    Category.LIFETIME,
    Category.CONTROL_PLANE,
)
FILES, LIFE, CP = Capability.FILES, Capability.LIFETIME, Capability.CONTROL_PLANE

# fmt: off
PROPERTIES: tuple[Property, ...] = (
    # -- Boundary -----------------------------------------------------------------------
    _p("BND-001", B, "The kernel seen inside is not the node's kernel",
       "Code that talks to the host kernel directly is one kernel bug away from the host."),
    _p("BND-002", B, "No host PID namespace: a host process is invisible",
       "Seeing host processes is the first step to signalling, tracing or reading them."),
    _p("BND-003", B, "No host network namespace: no node address or host interface inside",
       "The host's interfaces would expose every node-local service and the node's traffic."),
    _p("BND-004", B, "No host IPC namespace: a host SysV shared-memory segment is invisible",
       "Shared IPC lets the guest read or corrupt other workloads' shared memory."),
    _p("BND-005", B, "Host kernel internals are hidden (modules, symbol addresses, kernel log)",
       "Module lists, kernel addresses and the kernel log are the map a kernel exploit needs."),
    # -- Network ------------------------------------------------------------------------
    _p("NET-001", N, "No network interface but lo",
       "With no interface there is no path out, whatever any policy or firewall says."),
    _p("NET-002", N, "Loopback works: a process can bind and connect on 127.0.0.1",
       "Test suites and local servers need loopback; isolation must not break it."),
    _p("NET-003", N, "TCP to a canary pod fails",
       "Other pods in the cluster (databases, internal APIs) must be out of reach."),
    _p("NET-004", N, "TCP to a canary Service fails",
       "Service virtual IPs are a second way to the same pods and must be closed too."),
    _p("NET-005", N, "TCP to the node fails",
       "The node runs the kubelet and other daemons that trust local callers."),
    _p("NET-006", N, "DNS resolution fails and a canary DNS server receives nothing",
       "DNS is the classic exfiltration channel that survives an egress block."),
    _p("NET-007", N, "The API server is unreachable",
       "Without a route to the API server, no leaked or found credential can be used."),
    _p("NET-008", N, "A canary standing in for a cloud metadata endpoint is unreachable",
       "Metadata endpoints hand node credentials to anything that can reach them."),
    _p("NET-009", N, "Nothing outside can connect in to a listener in the sandbox",
       "An inbound path lets other workloads drive code in the sandbox or use it as a relay."),
    # -- Identity and privilege ---------------------------------------------------------
    _p("IDN-001", I, "Runs as uid/gid 1000, not root, with no privileged groups",
       "Root inside is the starting point of most container escapes."),
    _p("IDN-002", I, "Every capability set is empty",
       "Capabilities are root's powers in pieces; any one left is an escalation path."),
    _p("IDN-003", I, "no_new_privs is set",
       "Without it, setuid files and file capabilities can raise privileges at exec."),
    _p("IDN-004", I, "A setuid binary does not escalate",
       "A setuid-root file in the image must not turn into root for the guest."),
    _p("IDN-005", I, "No ServiceAccount token anywhere in the filesystem",
       "A token is an identity on the API server, handed to untrusted code."),
    _p("IDN-006", I, "No Kubernetes environment variables leak service addresses",
       "Service links advertise the API server and every Service in the namespace."),
    _p("IDN-007", I, "mount is refused",
       "Mounting is how guests reach host filesystems, procfs tricks and overlay bugs."),
    _p("IDN-008", I, "unshare of user, mount, network and PID namespaces is refused",
       "New user namespaces hand out capabilities that unlock much more kernel surface."),
    _p("IDN-009", I, "ptrace of other processes is refused",
       "Tracing another process reads its memory and hijacks what it runs."),
    _p("IDN-010", I, "Raw and packet sockets are refused",
       "Raw sockets forge traffic and sniff or spoof on whatever network is attached."),
    _p("IDN-011", I, "sysctl writes are refused",
       "Kernel tunables change behaviour for everything on the kernel that owns them."),
    _p("IDN-012", I, "Clock changes are refused",
       "A guest that moves the clock could confuse expiry, certificates and logs."),
    _p("IDN-013", I, "Kernel module loading is refused",
       "Loading a module is running code in the kernel."),
    # -- Filesystem ---------------------------------------------------------------------
    _p("FS-001", F, "The root filesystem is read-only",
       "A writable image lets code plant files that outlive a command or alter tools."),
    _p("FS-002", F, "Only /tmp, /workspace and the state directory are writable",
       "Every writable place is space to persist in and a budget to account for."),
    _p("FS-003", F, "Scratch space is noexec",
       "A file written to scratch cannot be run or mapped executable, nor carry a working "
       "setuid bit or device node. This does not stop native code a program brought in "
       "(memfd_create, anonymous executable memory): the runtime boundary contains that."),
    _p("FS-004", F, "/dev/shm is not a writable space outside the declared scratch",
       "A writable /dev/shm is one more place to persist in and a budget nobody declared."),
    _p("FS-005", F, "Path traversal through the files API stays inside the sandbox",
       "A file API that resolves '..' on the host side writes outside the sandbox.",
       FILES),
    _p("FS-006", F, "Symlink tricks through the files API stay inside the sandbox",
       "A guest-planted symlink followed by a host-side helper reads or writes host files.",
       FILES),
    _p("FS-007", F, "Nothing of the host is visible: no host paths, sockets or mounts",
       "Host paths, runtime sockets and kubelet directories leak data and are escape tools."),
    _p("FS-008", F, "Only harmless device nodes exist",
       "Block, memory and kernel-log devices are direct lines into the host."),
    # -- Resources ----------------------------------------------------------------------
    _p("RES-001", R, "The memory cap is enforced",
       "Unbounded memory starves every other workload on the node.", deadline=180),
    _p("RES-002", R, "The process cap contains a fork bomb and the node stays healthy",
       "A fork bomb without a cap exhausts the node's PIDs for everyone.", deadline=180),
    _p("RES-003", R, "The scratch cap gives ENOSPC without touching the node's disk",
       "Unbounded scratch fills the node's disk and evicts its other pods."),
    _p("RES-004", R, "The CPU share is bounded",
       "A busy loop must not take CPU that other workloads were promised."),
    _p("RES-005", R, "An output flood is capped",
       "Unbounded output exhausts the caller's memory or the model's context."),
    # -- Time and lifetime --------------------------------------------------------------
    _p("TIME-001", T, "The exec timeout kills the whole tree, setsid and double forks included",
       "A process that escapes its command's timeout runs on unseen, unpaid and unbounded."),
    _p("TIME-002", T, "An idle sandbox is reaped at its idle timeout",
       "Forgotten sandboxes must not pile up holding resources.", LIFE, 180),
    _p("TIME-003", T, "A sandbox is reaped at its maximum age, however busy",
       "Max age bounds exposure without needing the guest or the caller to cooperate.",
       LIFE, 180),
    _p("TIME-004", T, "The guest cannot extend its own life",
       "If the guest could touch its own activity clock it could live forever.", LIFE, 180),
    _p("TIME-005", T, "A guest that kills its own init is recovered through create",
       "A guest must not be able to wedge a sandbox so the caller cannot get it back.",
       deadline=180),
    # -- Control plane (a second, unprivileged identity) --------------------------------
    _p("CTL-001", C, "An unprivileged caller cannot read profiles",
       "Profiles are the admin's policy; callers name them and need nothing more.", CP),
    _p("CTL-002", C, "An unprivileged caller cannot change profiles",
       "Whoever edits a profile chooses image, runtime, user and caps for everyone.", CP),
    _p("CTL-003", C, "A Sandbox cannot carry an image, runtime, user or capabilities",
       "Weakening must be unreachable: the caller names a profile and nothing else.", CP),
    _p("CTL-004", C, "A caller cannot use a profile not allowed in its namespace",
       "Profiles are granted per namespace; an unlisted one must be refused at the door.",
       CP),
    _p("CTL-005", C, "Nobody but the operator can create sandbox pods, not even a pod creator",
       "A hand-made pod posing as a sandbox would skip every hardening the profile sets.",
       CP),
    _p("CTL-006", C, "Sandbox pods cannot be patched, deleted or given extra containers",
       "Changing a running sandbox's pod is weakening it after the fact.", CP),
    _p("CTL-007", C, "A caller cannot exec into another namespace's sandbox",
       "Exec is full control of a sandbox; it must stop at the namespace boundary.", CP),
    _p("CTL-008", C, "A Sandbox whose runtime is unavailable fails closed",
       "Falling back to runc would run untrusted code on the host kernel.", CP, 120),
    _p("CTL-009", C, "A Sandbox cannot lengthen its life beyond its profile's",
       "Lifetime fields may only shorten what the admin allowed.", CP, 120),
    _p("CTL-010", C, "An unprivileged caller cannot forge a Sandbox's status",
       "Status is what the operator observed (boundary, readiness); forging it lies to users.",
       CP),
)
# fmt: on

BY_ID: dict[str, Property] = {p.id: p for p in PROPERTIES}


def select(ids: list[str] | None) -> tuple[Property, ...]:
    """Properties in registry order; ``ids`` may name IDs or ID prefixes such as ``NET``."""
    if not ids:
        return PROPERTIES
    chosen = tuple(p for p in PROPERTIES if any(p.id == i or p.id.startswith(i) for i in ids))
    unknown = [i for i in ids if not any(p.id == i or p.id.startswith(i) for p in PROPERTIES)]
    if unknown:
        raise ValueError(f"unknown property IDs: {', '.join(unknown)}")
    return chosen
