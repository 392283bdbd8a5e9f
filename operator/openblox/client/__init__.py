"""The caller's side: create sandboxes from profiles and run code in them.

`Client` (`sync_client`) and `AsyncClient` (`async_client`) are two thin shells over one
set of plans (`client_steps`, `sandbox_steps`, `files`, `supervised`, `findings`, on
`effects`): every decision is written once, and each shell only performs I/O its way
(`sync_io`, `async_io`; ADR 0017).

The async client is loaded on first use (`from openblox.client import AsyncClient` works
as before): it brings aiohttp, which a caller of the sync `Client`, the CLI among them,
need not pay for in import time and memory.
"""

from typing import TYPE_CHECKING, Any

from openblox.client.errors import (
    AdmissionDenied,
    ExecTransportError,
    FileOperationError,
    InvalidArgument,
    OpenbloxClientError,
    OutputLimitExceeded,
    ProcessNotFound,
    ProcessRecordDamaged,
    SandboxGone,
    SandboxNotReady,
    SandboxStalled,
    SandboxTimeout,
)
from openblox.client.limits import ExecLimits
from openblox.client.processes import Process, Processes
from openblox.client.results import ExecResult
from openblox.client.supervised import OutputChunk
from openblox.client.sync_client import Client, ExecStream, Sandbox

if TYPE_CHECKING:
    from openblox.client.async_client import AsyncClient, AsyncExecStream, AsyncSandbox

_ASYNC = ("AsyncClient", "AsyncExecStream", "AsyncSandbox")

__all__ = [
    "AdmissionDenied",
    "AsyncClient",
    "AsyncExecStream",
    "AsyncSandbox",
    "Client",
    "ExecLimits",
    "ExecResult",
    "ExecStream",
    "ExecTransportError",
    "FileOperationError",
    "InvalidArgument",
    "OpenbloxClientError",
    "OutputChunk",
    "OutputLimitExceeded",
    "Process",
    "ProcessNotFound",
    "ProcessRecordDamaged",
    "Processes",
    "Sandbox",
    "SandboxGone",
    "SandboxNotReady",
    "SandboxStalled",
    "SandboxTimeout",
]


def __getattr__(name: str) -> Any:
    if name in _ASYNC:
        from openblox.client import async_client

        return getattr(async_client, name)
    raise AttributeError(f"module 'openblox.client' has no attribute {name!r}")
