"""Background commands: what the client knows about one, the rules for their names, and
the reading of the supervisor's answers about them.

The supervisor reads its records from a directory the guest can write, checks every field
and bounds its answer; the client checks the answer again, since the supervisor shares a
uid with the guest: a record that is not one the supervisor writes is refused, not guessed at.
"""

from __future__ import annotations

import builtins
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from openblox.client.errors import ExecTransportError, InvalidArgument

# Each of stdout and stderr keeps at most this many bytes (the newest) in the sandbox's
# state volume, so a chatty server cannot fill it; `logs` reads no more than this.
LOG_BYTES = 1024 * 1024
# The most bytes of the supervisor's answer to `start`, `ps` or `stop` (supervisor.py's
# copy is held equal by tests/unit/test_names.py): `ps` keeps its answer under it and
# says how many commands it left out, and the client stops reading past it.
ANSWER_BYTES = 1 << 20
_NAME = re.compile(r"[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?")
_STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


def valid_process_name(name: object) -> bool:
    return isinstance(name, str) and bool(_NAME.fullmatch(name)) and ".." not in name


def check_process_name(name: str) -> None:
    """Names become a directory in the sandbox: lower-case DNS-label-like, nothing else."""
    if not valid_process_name(name):
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
    unreadable: str | None = None
    """Why part of the record in the sandbox could not be read (something there changed
    it); None when all of it was. The name and `running` (from the keeper's lock) stand."""

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
            unreadable=record.get("unreadable"),
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
            "unreadable": self.unreadable,
        }


class Processes(list[Process]):
    """`processes()`: every named background command, and `omitted`, how many entries of the
    sandbox's state directory were left out: not a command's directory (planted there), or
    past the bound of the answer."""

    def __init__(self, processes: Iterable[Process] = (), omitted: int = 0) -> None:
        super().__init__(processes)
        self.omitted = omitted

    def notes(self) -> builtins.list[str]:
        """What a person reading the listing should be told: damaged records, left-outs."""
        notes = [f"{p.name}: {p.unreadable}" for p in self if p.unreadable]
        if self.omitted:
            notes.append(
                f"{self.omitted} more entries in the sandbox's process state were left out "
                "(not a command openblox started, or past the answer's bound)"
            )
        return notes


def process_of(answer: bytes, operation: str) -> Process:
    """The one record `start` or `stop` answers with."""
    lines = answer.splitlines()
    if len(lines) != 1:
        raise _malformed(operation)
    return Process.from_record(_checked(lines[0], operation))


def processes_of(answer: bytes) -> Processes:
    """`ps`'s answer: a record a line, then, if any entry was left out, {"omitted": N}."""
    lines = [line for line in answer.splitlines() if line]
    omitted = _omitted(lines[-1]) if lines else None
    if omitted is not None:
        lines.pop()
    records = (Process.from_record(_checked(line, "ps")) for line in lines)
    return Processes(records, omitted or 0)


def _is_whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_pid(value: object) -> bool:
    return value is None or (isinstance(value, int) and not isinstance(value, bool) and value > 1)


def _is_stamp(value: object) -> bool:
    return value is None or (isinstance(value, str) and bool(_STAMP.fullmatch(value)))


# Every field the supervisor may send, and its check; a record with another is not its.
_FIELDS: dict[str, Callable[[object], bool]] = {
    "name": valid_process_name,
    "running": lambda v: isinstance(v, bool),
    "argv": lambda v: isinstance(v, list) and all(isinstance(part, str) for part in v),
    "pid": _is_pid,
    "startedAt": _is_stamp,
    "exitCode": lambda v: v is None or _is_whole(v),
    "signal": lambda v: v is None or _is_whole(v),
    "endedAt": _is_stamp,
    "stopped": lambda v: isinstance(v, bool),
    "started": lambda v: v is None or isinstance(v, bool),
    "unreadable": lambda v: v is None or (isinstance(v, str) and len(v) <= 4096),
}


def _checked(line: bytes, operation: str) -> dict[str, Any]:
    record = _loaded(line)
    if not (
        isinstance(record, dict)
        and "name" in record
        and "running" in record
        and all(key in _FIELDS and _FIELDS[key](value) for key, value in record.items())
    ):
        raise _malformed(operation)
    return record


def _omitted(line: bytes) -> int | None:
    trailer = _loaded(line)
    if isinstance(trailer, dict) and list(trailer) == ["omitted"]:
        count = trailer["omitted"]
        return count if _is_whole(count) and count > 0 else None
    return None


def _loaded(line: bytes) -> object:
    try:
        return json.loads(line)
    except (ValueError, RecursionError):  # deep nesting is a RecursionError, not a ValueError
        return None


def _malformed(operation: str) -> ExecTransportError:
    return ExecTransportError(
        f"the answer to {operation} is malformed: it holds what the supervisor never writes"
    )
