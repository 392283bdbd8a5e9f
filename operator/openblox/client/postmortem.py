"""Why an exec ended without the supervisor's verdict: pure, on what the API server showed.

After a stream breaks, the client reads the pod (and, if it was replaced, the Sandbox)
for a few seconds; these functions say what each reading means. Its pod ended (an
OOM kill is a memory denial, `denials.pod_denial` names it), was replaced or is being
deleted (the operator recorded why in the Sandbox's status, or the sandbox was reaped),
or is still running (then the stream itself broke, and what the command did is unknown).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum
from typing import Any

from openblox.denials import Denial, InvalidDenial, pod_denial
from openblox.names import CONTAINER_NAME
from openblox.timestamps import parse_optional_timestamp
from openblox.transport.frames import exit_code_from_status, status_message

# A status denial this long before the exec started may still be what ended it (the two
# clocks, the client's and the operator's, are not the same clock).
CLOCK_SLACK = timedelta(seconds=2)

logger = logging.getLogger(__name__)


class Fate(Enum):
    RUNNING = "running"  # the pod the exec ran in is still there: the stream broke
    ENDED = "ended"  # its container or the pod itself ended: `denial` says why, if known
    REPLACED = "replaced"  # gone, being deleted, or a new pod stands in its place


@dataclass(frozen=True)
class PodFate:
    fate: Fate
    denial: Denial | None = None


def pod_fate(
    pod: Mapping[str, Any] | None, *, since: datetime, profile: str, now: datetime
) -> PodFate:
    """What one reading of the pod (None: it does not exist) says of an exec begun at `since`."""
    if pod is None or created_after(pod, since):
        return PodFate(Fate.REPLACED)
    status = pod.get("status") or {}
    ended = status.get("phase") in ("Failed", "Succeeded") or any(
        (entry.get("state") or {}).get("terminated")
        for entry in status.get("containerStatuses") or []
    )
    if ended:
        return PodFate(Fate.ENDED, pod_denial(pod, profile=profile, now=now))
    if (pod.get("metadata") or {}).get("deletionTimestamp") is not None:
        return PodFate(Fate.REPLACED)
    return PodFate(Fate.RUNNING)


def created_after(pod: Mapping[str, Any], since: datetime) -> bool:
    """Whether the pod was made after `since`: a replacement for the one the exec ran in."""
    created = parse_optional_timestamp((pod.get("metadata") or {}).get("creationTimestamp"))
    return created is not None and created > since


def parsed_denial(record: object, where: str) -> Denial | None:
    """A record read back from the API server, or None (and a log line) if it is not one:
    what someone else wrote there must not turn a caller's exec into a crash."""
    try:
        return Denial.from_dict(record)
    except InvalidDenial as error:
        logger.warning("skipping a denial record in %s that does not parse: %s", where, error)
        return None


def status_denial(sandbox: Mapping[str, Any] | None, since: datetime) -> Denial | None:
    """A denial the operator recorded in the Sandbox's status since `since`, if any."""
    for record in ((sandbox or {}).get("status") or {}).get("denials") or []:
        denial = parsed_denial(record, "the Sandbox's status")
        if denial is not None and denial.at >= since - CLOCK_SLACK:
            return denial
    return None


def denial_records(events: Sequence[Mapping[str, Any]]) -> list[Denial]:
    """The denial records in `Denied` Events' messages (JSON); a message that is not JSON
    is not a record and is passed over, one that is JSON but no record is logged too."""
    records = []
    for event in events:
        try:
            record = json.loads(event.get("message") or "")
        except ValueError:
            continue
        denial = parsed_denial(record, "a Denied Event")
        if denial is not None:
            records.append(denial)
    return records


def latest_denial(records: Sequence[Denial]) -> Denial | None:
    """The most recent of the denial records (by their `at`), or None."""
    return max(records, key=lambda record: record.at, default=None)


def gone_message(namespace: str, name: str, record: Denial | None) -> str:
    where = f"sandbox {namespace}/{name}"
    if record is None:
        return f"{where} went away during the exec"
    return (
        f"{where} was stopped during the exec: denied {record.denied} "
        f"({record.because}); its pod is replaced and files in /tmp and /workspace "
        "are lost"
    )


def no_verdict_message(status: bytes, diagnostics: bytes | bytearray) -> str:
    """The pod still runs but the exec ended without a verdict: the exit, what the API
    server's final Status says (the container runtime's reason, when it could not start
    the command), and the stderr."""
    code = exit_code_from_status(status) if status else None
    said = status_message(status)[-500:]
    return (
        "the exec ended without a result from the sandbox's supervisor "
        f"(exit {code}{'; ' + said if said else ''}); "
        f"stderr: {diagnostics.decode('utf-8', 'replace')[-500:]}"
    )


def pod_sizes(pod: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """The sandbox container's memory limit and the scratch volumes' size, as written."""
    spec = pod.get("spec") or {}
    memory = None
    for container in spec.get("containers") or []:
        if container.get("name") == CONTAINER_NAME:
            memory = ((container.get("resources") or {}).get("limits") or {}).get("memory")
    scratch = None
    for volume in spec.get("volumes") or []:
        if volume.get("name") == "workspace":
            scratch = (volume.get("emptyDir") or {}).get("sizeLimit")
    return (
        str(memory) if memory is not None else None,
        str(scratch) if scratch is not None else None,
    )
