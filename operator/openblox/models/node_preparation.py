"""What a node must give a sandbox pod, and whether a pod's own view shows it was given.

Kubernetes has no field for a noexec scratch mount, a bounded `/dev/shm` or a process cap:
the node provides them (the NRI plugin, gVisor's `network = "none"`). A node that was
never prepared, or whose plugin stopped, runs the same pod spec without them, so the
operator reads them from inside the pod (the boundary probe's one exec, `controller/
boundary.py`) and never hands out a pod that lacks one.

Pure: the probe's text and the pod the operator built in, the unmet requirements out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from openblox.models.profile import Boundary
from openblox.models.quantity import parse_quantity
from openblox.names import ANNOTATION_PROCESSES, STATE_DIR, TMP_DIR, WORKSPACE_DIR

SHM_DIR = "/dev/shm"
# The NRI plugin's bound on /dev/shm, which is also never larger than /tmp.
SHM_MAX_BYTES = 64 << 20
# The pod's memory-backed volumes, by the directory the sandbox container mounts them at.
SCRATCH_VOLUMES: Mapping[str, str] = {
    TMP_DIR: "tmp",
    WORKSPACE_DIR: "workspace",
    STATE_DIR: "state",
}
# gVisor's mountinfo does not print `nodev` (its VFS keeps the flag but does not show it),
# so only what every runtime shows is required; a sandbox cannot make a device node in any
# case (no CAP_MKNOD, and gVisor's devices are its own).
REQUIRED_MOUNT_FLAGS = ("noexec", "nosuid")
# Where a missing `size=` is refused. /dev/shm's is the NRI plugin's own mount option, so
# every prepared node shows it. The emptyDirs' sizes come from the kubelet's host tmpfs,
# and gVisor shows them only where runsc carries them into its own tmpfs: the kind nodes'
# stock runsc shows none. There an emptyDir is bounded by the pod's memory limit (the
# profile parser keeps 2 x scratch + state below it), not by its sizeLimit; a size that is
# shown must still be within the profile's (ADR 0019).
SIZE_SHOWN_BY_NODE = frozenset({SHM_DIR})
# What the probe prints, in order: `cat` of these files (`controller/boundary.py`). Each
# begins in a way no line of the one before it can: /proc/version is one line,
# mountinfo's lines begin with a mount ID, limits' with its header `Limit`, net/dev's with
# its header `Inter-|`. So the output splits without separators, and no program but `cat`
# starts (a shell's `read` goes a byte at a time, which under a 100m CPU limit in a booting
# gVisor sandbox cost about 400 ms).
PROBED_FILES = ("/proc/version", "/proc/self/mountinfo", "/proc/self/limits", "/proc/net/dev")
_LIMITS_HEADER = "Limit "
_INTERFACES_HEADER = "Inter-|"

_SIZE = re.compile(r"(?P<number>\d+)(?P<unit>[kKmMgG]?)")
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


@dataclass(frozen=True, slots=True)
class NodeRequirements:
    """What the pod must see: its scratch mounts' bounds in bytes, its process cap, and
    whether its only network interface may be loopback (gVisor's networking off)."""

    mount_bytes: Mapping[str, int]
    processes: int
    only_loopback: bool


@dataclass(frozen=True, slots=True)
class ProbeReport:
    """The boundary probe's output, split into the files it read."""

    release: str
    """The third word of /proc/version, as `uname -r` prints it."""
    version: str
    mounts: tuple[str, ...]
    limits: tuple[str, ...]
    interfaces: tuple[str, ...]
    complete: bool
    """False unless `cat` exited 0 and every file's start came: a cut stream decides
    nothing."""


def split_probe_output(text: str, *, exited_cleanly: bool) -> ProbeReport:
    """The probe's output (`cat PROBED_FILES`), split where each file begins."""
    first, _, rest = text.partition("\n")
    version = first.strip()
    files: list[list[str]] = [[], [], []]
    current = 0
    for line in rest.split("\n"):
        if current == 0 and line.startswith(_LIMITS_HEADER):
            current = 1
        elif current == 1 and line.startswith(_INTERFACES_HEADER):
            current = 2
        if line.strip():
            files[current].append(line)
    words = version.split()
    return ProbeReport(
        release=words[2] if len(words) > 2 else "",
        version=version,
        mounts=tuple(files[0]),
        limits=tuple(files[1]),
        interfaces=tuple(files[2]),
        complete=exited_cleanly and bool(version) and current == 2,
    )


def requirements_of(pod: Mapping[str, Any], expected: Boundary | None) -> NodeRequirements | None:
    """What a sandbox pod the operator built must see inside, or None for a profile that
    claims no boundary (an `unsafe` one: the node owes it nothing the probe checks).

    Read from the pod itself (its volumes' size limits, its process-cap annotation): only
    the operator makes sandbox pods, so the pod says what its profile asked for."""
    if expected is None:
        return None
    volumes = {volume.get("name"): volume for volume in pod["spec"].get("volumes") or ()}
    mount_bytes: dict[str, int] = {}
    for directory, name in SCRATCH_VOLUMES.items():
        limit = ((volumes.get(name) or {}).get("emptyDir") or {}).get("sizeLimit")
        mount_bytes[directory] = int(parse_quantity(str(limit))) if limit else 0
    mount_bytes[SHM_DIR] = min(SHM_MAX_BYTES, mount_bytes[TMP_DIR] or SHM_MAX_BYTES)
    annotations = pod["metadata"].get("annotations") or {}
    return NodeRequirements(
        mount_bytes=mount_bytes,
        processes=int(annotations.get(ANNOTATION_PROCESSES, "0") or 0),
        only_loopback=expected == "gvisor",
    )


def unmet_requirements(report: ProbeReport, requirements: NodeRequirements) -> tuple[str, ...]:
    """Each requirement the pod's view does not show, in words an admin can act on."""
    if not report.complete:
        return ("the probe's output was cut short",)
    unmet: list[str] = []
    mounts = _mounts(report.mounts)
    for directory, bound in requirements.mount_bytes.items():
        mount = mounts.get(directory)
        if mount is None:
            unmet.append(f"{directory} is not a mount of its own")
            continue
        flags, options = mount
        lacking = [flag for flag in REQUIRED_MOUNT_FLAGS if flag not in flags]
        if lacking:
            unmet.append(f"{directory} is mounted without {','.join(lacking)}")
        size = _size(options)
        if size is None:
            if directory in SIZE_SHOWN_BY_NODE:
                unmet.append(f"{directory} has no size bound")
        elif bound and size > bound:
            unmet.append(f"{directory} holds {size} bytes, more than the profile's {bound}")
    processes = _process_cap(report.limits)
    if requirements.processes and (processes is None or processes > requirements.processes):
        seen = "unlimited" if processes is None else str(processes)
        unmet.append(f"RLIMIT_NPROC is {seen}, not the profile's {requirements.processes}")
    if requirements.only_loopback:
        others = sorted(name for name in _interfaces(report.interfaces) if name != "lo")
        if others:
            unmet.append(f"network interfaces besides lo: {', '.join(others)}")
    return tuple(unmet)


def _mounts(lines: Sequence[str]) -> dict[str, tuple[frozenset[str], str]]:
    """Mount point -> (its per-mount flags, its filesystem's options); a later line wins,
    as a later mount hides an earlier one at the same place (proc(5) mountinfo)."""
    mounts: dict[str, tuple[frozenset[str], str]] = {}
    for line in lines:
        before, separator, after = line.partition(" - ")
        fields, tail = before.split(), after.split()
        if not separator or len(fields) < 6 or len(tail) < 3:
            continue
        mounts[fields[4]] = (frozenset(fields[5].split(",")), tail[2])
    return mounts


def _size(options: str) -> int | None:
    for option in options.split(","):
        name, _, value = option.partition("=")
        match = _SIZE.fullmatch(value) if name == "size" else None
        if match is not None:
            size = int(match["number"]) * _UNITS[match["unit"].lower()]
            return size if size > 0 else None
    return None


def _process_cap(lines: Sequence[str]) -> int | None:
    """The larger of the soft and hard "Max processes" limits; None when unlimited."""
    for line in lines:
        if line.startswith("Max processes"):
            values = line.split()[2:4]
            if len(values) == 2 and all(value.isdigit() for value in values):
                return max(int(value) for value in values)
            return None
    return None


def _interfaces(lines: Sequence[str]) -> list[str]:
    """Interface names from /proc/net/dev (its two header lines carry a `|`)."""
    return [line.partition(":")[0].strip() for line in lines if ":" in line and "|" not in line]
