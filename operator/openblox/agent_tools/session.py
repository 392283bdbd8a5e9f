"""One MCP session's sandbox: created on first use, from what the server's operator chose.

The profile, namespace and lifetime come from the command line of `openblox mcp`, never
from the model. Every method blocks (it talks to the API server); the server calls them
from worker threads.
"""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass

from openblox.client import Client, Sandbox, SandboxGone
from openblox.client.errors import denial_of


@dataclass(frozen=True)
class SessionConfig:
    """What the person running the server chose; the model can change none of it."""

    profile: str
    namespace: str | None = None
    kubeconfig: str | None = None
    context: str | None = None
    idle_timeout_seconds: int | None = None
    max_age_seconds: int | None = None
    create_timeout_seconds: float = 120.0
    preview_ttl_seconds: float = 3600.0
    preview_base_url: str | None = None


class SandboxReaped(SandboxGone):
    """The session's sandbox no longer exists; the next call starts a fresh one."""


class SandboxSession:
    """The one sandbox of an MCP session, made lazily and deleted when the session ends."""

    def __init__(self, config: SessionConfig, client: Client | None = None) -> None:
        self.config = config
        self._client = client
        self._lock = threading.Lock()
        self._sandbox: Sandbox | None = None
        self._closed = False
        # Names this session made, so the close deletes a sandbox whose create was
        # interrupted too.
        self._made: set[str] = set()

    @property
    def client(self) -> Client:
        """The connection, made on first use: listing the tools needs no cluster."""
        if self._client is None:
            self._client = Client(
                self.config.namespace,
                kubeconfig=self.config.kubeconfig,
                context=self.config.context,
            )
        return self._client

    @property
    def current(self) -> Sandbox | None:
        return self._sandbox

    def sandbox(self) -> Sandbox:
        """The session's sandbox, created (and waited for) on the first call."""
        with self._lock:
            if self._closed:
                raise SandboxGone("the MCP session is ending; its sandbox is being deleted")
            if self._sandbox is None:
                name = f"mcp-{secrets.token_hex(4)}"
                self._made.add(name)
                self._sandbox = self.client.create(
                    self.config.profile,
                    name,
                    idle_timeout_seconds=self.config.idle_timeout_seconds,
                    max_age_seconds=self.config.max_age_seconds,
                    timeout=self.config.create_timeout_seconds,
                )
            return self._sandbox

    def check_alive(self, error: Exception) -> None:
        """After a failed call: if the sandbox is gone (reaped, deleted), forget it and say
        so; a sandbox whose pod was only replaced is kept, with its new pod."""
        with self._lock:
            sandbox = self._sandbox
            if sandbox is None:
                return
            try:
                body = self.client.get(sandbox.name, sandbox.namespace)
            except SandboxGone:
                body = None
            if body is not None and not body._body["metadata"].get("deletionTimestamp"):
                self._sandbox = body
                return
            self._sandbox = None
            self._made.discard(sandbox.name)
        record = denial_of(error)
        raise SandboxReaped(
            f"the session's sandbox {sandbox.name} no longer exists (reaped when idle or at "
            "its max age, or deleted); its files and processes are lost. The next call "
            "starts a fresh, empty sandbox.",
            record,
        ) from error

    def delete(self) -> str | None:
        """Delete the sandbox, if there is one; the next call makes a new one."""
        with self._lock:
            sandbox, self._sandbox = self._sandbox, None
            if sandbox is None:
                return None
            self.client.delete(sandbox.name, sandbox.namespace)
            self._made.discard(sandbox.name)
            return sandbox.name

    def close(self) -> None:
        """The session ended: delete what it made. Safe to call twice, and from a signal
        handler (it takes no lock a worker may hold)."""
        self._closed = True
        made = set(self._made)
        if self._sandbox is not None:
            made.add(self._sandbox.name)
        for name in made:
            self.client.delete(name)
            self._made.discard(name)
        self._sandbox = None
