"""Turning the client's results into what a model reads: pure, no cluster, no I/O.

A model acts on words, so every result says what it means for the next step: output cut
at the cap, a command killed at its timeout, a policy in the way (with what to do
instead of retrying), a log that may hold only its newest part.
"""

from __future__ import annotations

import base64
import binascii
import json
import posixpath
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from openblox.agent_tools.schemas import (
    WRITABLE_PLACES,
    Denial,
    FileContent,
    ProcessInfo,
    ProcessLogs,
    RunResult,
)
from openblox.denials import Denial as DenialRecord
from openblox.names import WORKSPACE_DIR

# What to do instead of retrying, for each category of docs/denials.md.
DENIAL_ADVICE = {
    "network": "the sandbox has no network beyond loopback, by policy: do not retry; "
    "use data inside the sandbox, or serve it on 127.0.0.1 there",
    "filesystem": "only /workspace and /tmp are writable, and nothing there may be "
    "executed directly: write under /workspace and run files with their interpreter "
    "(python3 file.py, sh file.sh)",
    "memory": "the command used more memory than the profile allows: process less data "
    "at once, or stream it",
    "disk": "the scratch space is full: remove files from /workspace or /tmp",
    "processes": "the command started more processes than the profile allows: start fewer",
    "time": "the command ran past its timeout: do less per call, or run it in the "
    "background with start_process",
    "output": "the output was cut at the profile's cap: write large output to a file and "
    "read the part you need",
    "privilege": "the sandbox runs as an unprivileged user with no capabilities: this "
    "cannot be done here",
    "lifetime": "the sandbox reached its lifetime and was deleted: the next call starts a "
    "fresh, empty one",
    "admission": "the cluster refused to create the sandbox: the person running this "
    "server has to fix its --profile or --namespace",
}


class ExecLike(Protocol):
    """What `openblox.client.ExecResult` holds (the client itself is not imported here)."""

    @property
    def stdout(self) -> bytes: ...
    @property
    def stderr(self) -> bytes: ...
    @property
    def exit_code(self) -> int: ...
    @property
    def timed_out(self) -> bool: ...
    @property
    def truncated(self) -> bool: ...
    @property
    def duration(self) -> float: ...
    @property
    def denials(self) -> Sequence[DenialRecord]: ...


def denial_note(record: DenialRecord) -> str:
    attempted = f" {record.attempted}" if record.attempted else ""
    advice = DENIAL_ADVICE.get(record.denied, "a policy of the sandbox refused this")
    return f"denied {record.denied}{attempted} ({record.because}): {advice}"


def run_result(result: ExecLike, *, sandbox: str, timeout: float, cap: int) -> RunResult:
    """The tool result of one command: output as text, verdicts, and what they mean."""
    notes = []
    if result.timed_out:
        notes.append(
            f"timed out after {timeout:g}s: the command and every process it started were "
            "killed; do less per call, or use start_process for long-running work"
        )
    if result.truncated:
        notes.append(
            f"output was cut at the profile's cap of {cap} bytes (stdout and stderr "
            "together): write large output to a file and read the part you need"
        )
    notes.extend(denial_note(record) for record in result.denials)
    return RunResult(
        exit_code=result.exit_code,
        timed_out=result.timed_out,
        truncated=result.truncated,
        stdout=result.stdout.decode("utf-8", "replace"),
        stderr=result.stderr.decode("utf-8", "replace"),
        duration_seconds=round(result.duration, 4),
        denials=[Denial.model_validate(record.to_dict()) for record in result.denials],
        notes=notes,
        sandbox=sandbox,
    )


def sandbox_path(path: str) -> str:
    """An absolute, normalised path; a relative one is taken from /workspace."""
    if "\0" in path:
        raise ValueError("a path cannot contain a NUL byte")
    return posixpath.normpath(posixpath.join(WORKSPACE_DIR, path))


def writable_path(path: str) -> str:
    """The normalised path, if it lies under a writable place; else a ValueError that names
    the places (a write elsewhere fails on the read-only root anyway, less legibly)."""
    resolved = sandbox_path(path)
    if not any(resolved.startswith(f"{place}/") for place in WRITABLE_PLACES):
        raise ValueError(
            f"{path} is outside the writable places: write under "
            f"{' or '.join(WRITABLE_PLACES)} (the rest of the filesystem is read-only)"
        )
    return resolved


def decode_upload(content: str, encoding: str) -> bytes:
    if encoding == "utf-8":
        return content.encode()
    try:
        return base64.b64decode(content, validate=True)
    except (binascii.Error, ValueError) as error:
        raise ValueError(f"content is not valid base64: {error}") from error


def file_content(path: str, data: bytes) -> FileContent:
    """Text if the bytes are UTF-8, otherwise base64, so no byte is lost or invented."""
    try:
        return FileContent(path=path, encoding="utf-8", content=data.decode(), size=len(data))
    except UnicodeDecodeError:
        return FileContent(
            path=path,
            encoding="base64",
            content=base64.b64encode(data).decode(),
            size=len(data),
        )


def process_info(record: Mapping[str, Any], started: bool | None = None) -> ProcessInfo:
    """From `Process.to_dict()` (camelCase, as the CLI prints it)."""
    return ProcessInfo(
        name=str(record["name"]),
        argv=[str(part) for part in record.get("argv") or ()],
        running=bool(record.get("running")),
        pid=record.get("pid"),
        started_at=record.get("startedAt"),
        exit_code=record.get("exitCode"),
        signal=record.get("signal"),
        ended_at=record.get("endedAt"),
        stopped=bool(record.get("stopped")),
        started=started,
        unreadable=record.get("unreadable"),
    )


def process_logs(name: str, stream: str, data: bytes, limit: int) -> ProcessLogs:
    notes = []
    if len(data) >= limit:
        notes.append(f"only the last {limit} bytes are shown; older output may exist")
    if not data:
        notes.append(f"nothing on {stream} yet")
    return ProcessLogs(
        name=name,
        stream="stderr" if stream == "stderr" else "stdout",
        data=data.decode("utf-8", "replace"),
        bytes=len(data),
        notes=notes,
    )


def error_text(message: str, record: DenialRecord | None = None) -> str:
    """A tool error's text: what happened, then the denial record and its advice, if any."""
    if record is None:
        return message
    wire = json.dumps(record.to_dict(), sort_keys=True)
    return f"{message}\n{denial_note(record)}\ndenial: {wire}"
