"""The caller's side: create sandboxes from profiles and run code in them."""

from openblox.client.async_client import AsyncClient, AsyncExecStream, AsyncSandbox
from openblox.client.errors import (
    AdmissionDenied,
    ExecTransportError,
    FileOperationError,
    InvalidArgument,
    OpenbloxClientError,
    ProcessNotFound,
    SandboxGone,
    SandboxNotReady,
    SandboxTimeout,
)
from openblox.client.limits import ExecLimits
from openblox.client.processes import Process
from openblox.client.results import ExecResult
from openblox.client.supervised import ExecStream, OutputChunk
from openblox.client.sync import Client, Sandbox

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
    "Process",
    "ProcessNotFound",
    "Sandbox",
    "SandboxGone",
    "SandboxNotReady",
    "SandboxTimeout",
]
