"""Background commands: what the client knows about one, and the rules for their names."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from openblox.client.errors import InvalidArgument

# Each of stdout and stderr keeps at most this many bytes (the newest) in the sandbox's
# state volume, so a chatty server cannot fill it; `logs` reads no more than this.
LOG_BYTES = 1024 * 1024
# The most bytes of the supervisor's answer to `start`, `ps` or `stop`: the client stops
# reading past it.
ANSWER_BYTES = 1 << 20
_NAME = re.compile(r"[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?")


def check_process_name(name: str) -> None:
    """Names become a directory in the sandbox: lower-case DNS-label-like, nothing else."""
    if not isinstance(name, str) or not _NAME.fullmatch(name) or ".." in name:
        raise InvalidArgument(
            f"process name {name!r} must be 1-63 of a-z, 0-9, '.', '_' or '-', "
            "starting and ending with a letter or digit"
        )


@dataclass(frozen=True)
class Process:
    name: str
    argv: tuple[str, ...]
    running: bool
    pid: int | None
    started_at: str | None
    exit_code: int | None
    signal: int | None
    ended_at: str | None
    stopped: bool
    started: bool | None
    """From start_process: True if this call started it, False if it was already running."""

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Process:
        return cls(
            name=str(record["name"]),
            argv=tuple(record.get("argv") or ()),
            running=bool(record.get("running")),
            pid=record.get("pid"),
            started_at=record.get("startedAt"),
            exit_code=None if record.get("running") else record.get("exitCode"),
            signal=None if record.get("running") else record.get("signal"),
            ended_at=None if record.get("running") else record.get("endedAt"),
            stopped=bool(record.get("stopped")) and not record.get("running"),
            started=record.get("started"),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "argv": list(self.argv),
            "running": self.running,
            "pid": self.pid,
            "startedAt": self.started_at,
            "exitCode": self.exit_code,
            "signal": self.signal,
            "endedAt": self.ended_at,
            "stopped": self.stopped,
        }
