"""What the tools of `openblox mcp` take and return.

Every argument is typed and described here, so the model gets a JSON schema it can
follow and the SDK refuses a wrong type before any tool runs. None of them names a
namespace, profile, image, runtime or limit: the person running the server chose those.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from openblox.names import TMP_DIR, WORKSPACE_DIR

# The places a model may write: the sandbox's scratch directories. The supervisor's own
# state directory is writable too, but it is not the model's to change.
WRITABLE_PLACES = (WORKSPACE_DIR, TMP_DIR)
# How much of a background command's log one call returns, at most and by default.
LOG_LIMIT_BYTES = 1024 * 1024
DEFAULT_LOG_BYTES = 64 * 1024

# ---------------------------------------------------------------------------- inputs

Code = Annotated[
    str,
    Field(
        min_length=1,
        max_length=100_000,
        description="Python 3 source, run as `python3 -c SOURCE` in /workspace. "
        "Print what you want to see; the result carries stdout and stderr.",
    ),
]
Argv = Annotated[
    list[Annotated[str, Field(max_length=100_000)]],
    Field(
        min_length=1,
        max_length=1000,
        description='The command as a list of strings, e.g. ["ls", "-la", "/workspace"]. '
        'No shell: write ["sh", "-c", "a | b"] for pipes or redirection.',
    ),
]
TimeoutSeconds = Annotated[
    float | None,
    Field(
        gt=0,
        description="Seconds before the command and everything it started are killed. "
        "Leave it out for the profile's limit (list_profiles shows it); a value above "
        "that limit is refused.",
    ),
]
Stdin = Annotated[str | None, Field(description="Text passed to the command's stdin.")]
Cwd = Annotated[
    str | None,
    Field(description="Working directory inside the sandbox; default /workspace."),
]
FilePath = Annotated[
    str,
    Field(
        min_length=1,
        max_length=4096,
        description="A path inside the sandbox. Relative paths are taken from /workspace.",
    ),
]
WritablePath = Annotated[
    str,
    Field(
        min_length=1,
        max_length=4096,
        description="Where to write, under /workspace or /tmp (nothing else is writable). "
        "Relative paths are taken from /workspace. Parent directories must exist.",
    ),
]
ProcessName = Annotated[
    str,
    Field(
        pattern=r"^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$",
        description="A name for the background command: 1-63 of a-z, 0-9, '.', '_', '-'.",
    ),
]
Port = Annotated[
    int,
    Field(ge=1, le=65535, description="A TCP port a server listens on inside the sandbox."),
]
Encoding = Annotated[
    Literal["utf-8", "base64"],
    Field(description="How `content` is written: plain UTF-8 text, or base64 for bytes."),
]
LogStream = Annotated[Literal["stdout", "stderr"], Field(description="Which output to read.")]
LogBytes = Annotated[
    int,
    Field(ge=1, le=LOG_LIMIT_BYTES, description="Return at most the last this many bytes."),
]

# ---------------------------------------------------------------------------- outputs


class Denial(BaseModel):
    """A policy the command ran into, in the shape of docs/denials.md."""

    model_config = ConfigDict(extra="allow")

    denied: str = Field(description="network, filesystem, memory, processes, disk, time, ...")
    because: str = Field(description="The policy, e.g. egress=none")
    attempted: str | None = None
    profile: str | None = None
    at: str | None = None
    evidence: str | None = None
    inferred: bool | None = None


class RunResult(BaseModel):
    exit_code: int
    timed_out: bool = Field(description="True if the timeout killed the command")
    truncated: bool = Field(description="True if output was cut at the profile's cap")
    stdout: str
    stderr: str
    duration_seconds: float
    denials: list[Denial] = Field(description="Policies the command ran into; empty if none")
    notes: list[str] = Field(description="What the result means for your next step")
    sandbox: str


class FileWritten(BaseModel):
    path: str
    bytes: int


class FileContent(BaseModel):
    path: str
    encoding: Literal["utf-8", "base64"]
    content: str
    size: int


class FileEntry(BaseModel):
    name: str
    type: str
    size: int
    mode: str


class Listing(BaseModel):
    path: str
    entries: list[FileEntry]


class ProcessInfo(BaseModel):
    name: str
    argv: list[str]
    running: bool
    pid: int | None
    started_at: str | None
    exit_code: int | None
    signal: int | None
    ended_at: str | None
    stopped: bool
    started: bool | None = Field(
        default=None, description="From start_process: False if it was already running"
    )
    unreadable: str | None = Field(
        default=None,
        description="Why part of its record in the sandbox could not be read (something in "
        "the sandbox changed it); its name and running state still hold",
    )


class ProcessList(BaseModel):
    processes: list[ProcessInfo]
    omitted: int = Field(
        default=0,
        description="Entries of the sandbox's process state left out: not a command started "
        "here, or past the bound of the answer",
    )


class ProcessLogs(BaseModel):
    name: str
    stream: Literal["stdout", "stderr"]
    data: str
    bytes: int
    notes: list[str]


class PreviewLink(BaseModel):
    url: str
    port: int
    expires_in_seconds: float
    notes: list[str]


class ProfileInfo(BaseModel):
    name: str
    namespace: str
    sandbox: str
    timeout_seconds: float = Field(description="The longest a command may run")
    output_bytes: int = Field(description="stdout and stderr of one command are cut here")
    processes: int = Field(description="The most processes at once")
    writable: list[str]
    network: str
    expires_at: str | None


class Profiles(BaseModel):
    profiles: list[ProfileInfo]


class SandboxChange(BaseModel):
    deleted: str | None = Field(description="The sandbox deleted, or null if there was none")
    sandbox: str | None = Field(description="The fresh sandbox, or null until the next call")
    notes: list[str]
