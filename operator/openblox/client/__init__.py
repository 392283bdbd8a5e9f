"""The caller's side: create sandboxes from profiles and run code in them."""

from openblox.client.async_client import AsyncClient, AsyncSandbox
from openblox.client.errors import (
    AdmissionDenied,
    ExecTransportError,
    FileOperationError,
    InvalidArgument,
    OpenbloxClientError,
    SandboxGone,
    SandboxNotReady,
    SandboxTimeout,
)
from openblox.client.results import ExecResult
from openblox.client.sync import Client, Sandbox

__all__ = [
    "AdmissionDenied",
    "AsyncClient",
    "AsyncSandbox",
    "Client",
    "ExecResult",
    "ExecTransportError",
    "FileOperationError",
    "InvalidArgument",
    "OpenbloxClientError",
    "Sandbox",
    "SandboxGone",
    "SandboxNotReady",
    "SandboxTimeout",
]
