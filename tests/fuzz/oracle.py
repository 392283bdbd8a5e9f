"""What every fuzzed case is judged by: a pod no weaker than its profile, a refusal that
says what is wrong.

``weaknesses`` compares a sandbox pod (built by ``build_pod``, or read back from the API
server with its defaults filled in) with the profile it claims; every field that keeps
the sandbox in has a check, and any difference that loosens it is named. It is checked
itself against mutated pods in tests/unit/test_fuzz_oracle.py, so it cannot pass by
checking nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from fractions import Fraction
from typing import Any

from openblox.models import STATE_VOLUME_SIZE, Profile, parse_quantity
from openblox.names import LABEL_SANDBOX


class Violation(Exception):
    """A case that broke a rule: ``kind`` is crash, weaker or unclear."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail


def _amount(value: Any) -> Fraction | None:
    try:
        return parse_quantity(str(value)) if value is not None else None
    except ValueError:
        return None


def _not_above(name: str, got: Any, ceiling: Fraction) -> Iterator[str]:
    amount = _amount(got)
    if amount is None:
        yield f"{name} is missing or unreadable ({got!r})"
    elif amount > ceiling:
        yield f"{name} {got} is above the profile's {ceiling}"


def weaknesses(pod: Mapping[str, Any], profile: Profile) -> list[str]:
    """Every way the pod is weaker than the profile says it must be; [] if none."""
    return list(_weaknesses(pod, profile))


def _weaknesses(pod: Mapping[str, Any], profile: Profile) -> Iterator[str]:
    spec = pod.get("spec") or {}
    if spec.get("runtimeClassName") != profile.runtime_class_name:
        yield f"runtimeClassName {spec.get('runtimeClassName')!r}, not {profile.runtime_class_name}"
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            yield f"spec.{field} is set"
    if spec.get("automountServiceAccountToken") is not False:
        yield "the ServiceAccount token is mounted"
    if spec.get("enableServiceLinks") is not False:
        yield "service links are enabled"
    if spec.get("shareProcessNamespace"):
        yield "the process namespace is shared"
    deadline = spec.get("activeDeadlineSeconds")
    if not isinstance(deadline, int) or deadline > profile.lifetime.max_age_seconds:
        yield f"activeDeadlineSeconds {deadline!r} is not within max age"
    if spec.get("initContainers") or spec.get("ephemeralContainers"):
        yield "extra (init or ephemeral) containers"
    containers = spec.get("containers") or []
    if len(containers) != 1:
        yield f"{len(containers)} containers, not 1"
        return
    pod_security = spec.get("securityContext") or {}
    if pod_security.get("runAsUser") != profile.user or pod_security.get("runAsUser") == 0:
        yield f"pod runAsUser {pod_security.get('runAsUser')!r}, not {profile.user}"
    if pod_security.get("runAsGroup") != profile.group:
        yield f"pod runAsGroup {pod_security.get('runAsGroup')!r}, not {profile.group}"
    if pod_security.get("runAsNonRoot") is not True:
        yield "pod runAsNonRoot is not true"
    if set(pod_security.get("supplementalGroups") or []) - {profile.group}:
        yield f"supplementalGroups {pod_security.get('supplementalGroups')}"
    if pod_security.get("sysctls"):
        yield "sysctls are set"
    container = containers[0]
    if container.get("image") != profile.image:
        yield f"image {container.get('image')!r}, not {profile.image}"
    if container.get("command") != list(profile.command):
        yield f"command {container.get('command')!r}, not the profile's"
    if container.get("ports"):
        yield "container ports are published"
    security = container.get("securityContext") or {}
    if security.get("privileged"):
        yield "privileged"
    if security.get("allowPrivilegeEscalation") is not False:
        yield "allowPrivilegeEscalation is not false"
    if security.get("readOnlyRootFilesystem") is not True:
        yield "the root filesystem is writable"
    if security.get("runAsUser") not in (None, profile.user):
        yield f"container runAsUser {security.get('runAsUser')!r}"
    capabilities = security.get("capabilities") or {}
    if "ALL" not in (capabilities.get("drop") or []) or capabilities.get("add"):
        yield f"capabilities {capabilities!r}, not all dropped"
    seccomp = security.get("seccompProfile") or pod_security.get("seccompProfile") or {}
    if seccomp.get("type") not in ("RuntimeDefault", "Localhost"):
        yield f"seccomp {seccomp!r}"
    if security.get("procMount", "Default") != "Default":
        yield "procMount is not Default"
    resources = container.get("resources") or {}
    limits = resources.get("limits") or {}
    yield from _not_above(
        "CPU limit", limits.get("cpu"), Fraction(profile.resources.cpu.value, 1000)
    )
    yield from _not_above(
        "memory limit", limits.get("memory"), Fraction(profile.resources.memory.value)
    )
    yield from _not_above(
        "ephemeral-storage limit",
        limits.get("ephemeral-storage"),
        Fraction(profile.resources.ephemeral_storage.value),
    )
    yield from _volumes(spec, container, profile)
    labels = (pod.get("metadata") or {}).get("labels") or {}
    if LABEL_SANDBOX not in labels:
        yield f"the pod lacks the {LABEL_SANDBOX} label (the NetworkPolicy selects by it)"


def _volumes(
    spec: Mapping[str, Any], container: Mapping[str, Any], profile: Profile
) -> Iterator[str]:
    sizes = {
        "tmp": profile.resources.scratch.value,
        "workspace": profile.resources.scratch.value,
        "state": STATE_VOLUME_SIZE.value,
    }
    volumes = {v.get("name"): v for v in spec.get("volumes") or []}
    for name, volume in volumes.items():
        empty_dir = volume.get("emptyDir")
        if set(volume) != {"name", "emptyDir"} or not isinstance(empty_dir, Mapping):
            yield f"volume {name} is not an emptyDir"
            continue
        if empty_dir.get("medium") != "Memory":
            yield f"volume {name} is on node disk"
        if name not in sizes:
            yield f"volume {name} is not one the profile sizes"
            continue
        yield from _not_above(
            f"volume {name} size", empty_dir.get("sizeLimit"), Fraction(sizes[name])
        )
    for mount in container.get("volumeMounts") or []:
        if mount.get("name") not in volumes:
            yield f"mount of {mount.get('name')!r}, not one of the pod's emptyDirs"


# A refusal is clear when it is a sentence about the input, not a Python or Go artefact
# (a traceback, an object's repr, the API server's catch-all for a failed webhook or CEL).
_ARTEFACTS = (
    "Traceback (most recent call last)",
    "object at 0x",
    "Internal error occurred",
    "<nil>",
    "goroutine ",
    "no such key",
)


# The API server names the object's root as the field path `<nil>` (a root-level CEL
# rule, or its note that some rules were not checked): that is a field path, not a Go
# nil leaking into a message, so only that form is set aside before the artefact check.
_ROOT_FIELD_PATH = re.compile(r"(^|\[|, |is invalid: )<nil>: ")


def clear(message: str, *, must_mention: str | None = None) -> None:
    """Raise Violation("unclear") unless the message is a readable, bounded sentence."""
    text = message.strip()
    if not text:
        raise Violation("unclear", "an empty message")
    if len(text) > 4000:
        raise Violation("unclear", f"a {len(text)}-character message")
    for artefact in _ARTEFACTS:
        if artefact in _ROOT_FIELD_PATH.sub(r"\1", text):
            raise Violation("unclear", f"{artefact!r} in {text[:300]!r}")
    if must_mention is not None and must_mention not in text:
        raise Violation("unclear", f"{text[:300]!r} does not mention {must_mention!r}")
