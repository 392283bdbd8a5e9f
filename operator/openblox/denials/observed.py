"""Denials seen from outside the guest: a pod the kubelet ended, a reaped sandbox, a refused
create. Each is built from what the API server reports, which code in the sandbox cannot
write, so none is inferred. Pure: the callers (operator, client) do the reading.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from openblox.denials.record import Denial
from openblox.lifetime import Expiry, bounded_lifetime
from openblox.models import Profile, Sandbox
from openblox.names import CONTAINER_NAME
from openblox.timestamps import format_timestamp, parse_optional_timestamp


def _container(pod: Mapping[str, Any], field: str) -> Mapping[str, Any]:
    for entry in (pod.get("status") or {}).get(field) or []:
        if entry.get("name") == CONTAINER_NAME:
            return dict(entry)
    return {}


def _limit(pod: Mapping[str, Any], resource: str) -> str | None:
    for container in (pod.get("spec") or {}).get("containers") or []:
        if container.get("name") == CONTAINER_NAME:
            value = ((container.get("resources") or {}).get("limits") or {}).get(resource)
            return str(value) if value is not None else None
    return None


def pod_denial(pod: Mapping[str, Any], *, profile: str, now: datetime) -> Denial | None:
    """The denial a dead sandbox pod reports, if its end was a policy's doing.

    `pod` is the Pod as the API serves it (camelCase keys). OOMKilled is the memory limit
    (processes and the memory-backed scratch together); DeadlineExceeded is the kubelet
    enforcing max age through activeDeadlineSeconds; an eviction for ephemeral storage is
    the node-disk cap. Any other end (a crash, a node failure) is not a denial.
    """
    metadata = pod.get("metadata") or {}
    name = metadata.get("name", "?")
    status = pod.get("status") or {}
    terminated = (_container(pod, "containerStatuses").get("state") or {}).get("terminated") or {}
    # The time the pod reports, not the reading's, so two reads give one record.
    at = _ended_at(pod, terminated) or now
    if terminated.get("reason") == "OOMKilled":
        memory = _limit(pod, "memory")
        return Denial(
            denied="memory",
            attempted=(
                f"use more than {memory} of memory (processes and files in /tmp, "
                "/workspace together)"
                if memory
                else "use more memory than the sandbox's limit"
            ),
            because=f"memory={memory}" if memory else "memory limit",
            profile=profile,
            at=at,
            evidence=(
                f"kubelet: container {CONTAINER_NAME} of pod {name} terminated: OOMKilled "
                f"(exit code {terminated.get('exitCode')}); the sandbox is restarted empty"
            ),
            inferred=False,
        )
    reason = status.get("reason")
    message = str(status.get("message") or "")
    if reason == "DeadlineExceeded":
        deadline = (pod.get("spec") or {}).get("activeDeadlineSeconds")
        return Denial(
            denied="lifetime",
            attempted=f"keep pod {name} running past its max age",
            because=f"maxAgeSeconds={deadline}" if deadline else "maxAgeSeconds",
            profile=profile,
            at=at,
            evidence=f"kubelet: pod {name} DeadlineExceeded: {message}",
            inferred=False,
        )
    if reason == "Evicted" and "ephemeral" in message.lower():
        storage = _limit(pod, "ephemeral-storage")
        return Denial(
            denied="disk",
            attempted="use more node disk (logs, writable layer) than allowed",
            because=f"ephemeralStorage={storage}" if storage else "ephemeralStorage",
            profile=profile,
            at=at,
            evidence=f"kubelet: pod {name} Evicted: {message}",
            inferred=False,
        )
    return None


def _ended_at(pod: Mapping[str, Any], terminated: Mapping[str, Any]) -> datetime | None:
    finished = parse_optional_timestamp(terminated.get("finishedAt"))
    if finished is not None:
        return finished
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready" and condition.get("status") == "False":
            return parse_optional_timestamp(condition.get("lastTransitionTime"))
    return None


def lifetime_denial(sandbox: Sandbox, profile: Profile, expiry: Expiry) -> Denial:
    """The reaper's record for a sandbox it deletes at its idle timeout or max age.

    Deterministic (the time is the deadline, not the moment of the pass), so every
    reconcile that sees the same expiry produces the same record.
    """
    lifetime = bounded_lifetime(sandbox, profile)
    if expiry.reason == "Idle":
        # Where the idle clock the expiry ran on started: never a raw stamp of the
        # caller's, which may lie anywhere in the calendar (`compute_expiry` clamps it).
        idle_since = expiry.expires_at - timedelta(seconds=lifetime.idle_timeout_seconds)
        attempted = "alive while idle"
        because = f"idleTimeoutSeconds={lifetime.idle_timeout_seconds}"
        evidence = (
            "operator: no activity recorded through the API server since "
            f"{format_timestamp(idle_since)}; deleted at the idle deadline "
            f"{format_timestamp(expiry.expires_at)}"
        )
    else:
        attempted = "alive past its max age"
        because = f"maxAgeSeconds={lifetime.max_age_seconds}"
        evidence = (
            f"operator: created {format_timestamp(sandbox.creation_timestamp)}; deleted at the "
            f"max-age deadline {format_timestamp(expiry.expires_at)}"
        )
    return Denial(
        denied="lifetime",
        attempted=f"keep sandbox {sandbox.name} {attempted}",
        because=because,
        profile=profile.name,
        at=expiry.expires_at,
        evidence=evidence,
        inferred=False,
    )


def admission_denial(profile: str, message: str, now: datetime) -> Denial:
    """The API server (or its admission policy) refused to create the Sandbox."""
    return Denial(
        denied="admission",
        attempted=f"create a Sandbox with profile={profile}",
        because=message,
        profile=profile,
        at=now,
        evidence=f"API server: {message}",
        inferred=False,
    )
