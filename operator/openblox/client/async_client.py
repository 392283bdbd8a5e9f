"""`openblox.AsyncClient`: the same surface as Client, for asyncio callers.

The Kubernetes calls underneath are blocking; each runs in a worker thread so the
caller's event loop never waits on the network.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from openblox.client.processes import LOG_BYTES, Process
from openblox.client.results import ExecResult
from openblox.client.sync import DEFAULT_READ_LIMIT, Client, Files, Sandbox


class AsyncFiles:
    """`Sandbox.files` for asyncio callers."""

    def __init__(self, files: Files) -> None:
        self._files = files

    async def write(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        await asyncio.to_thread(self._files.write, path, data, mode)

    async def read(self, path: str, limit: int = DEFAULT_READ_LIMIT) -> bytes:
        return await asyncio.to_thread(self._files.read, path, limit)

    async def list(self, path: str = "/workspace") -> list[dict[str, Any]]:
        return await asyncio.to_thread(self._files.list, path)

    async def remove(self, path: str) -> None:
        await asyncio.to_thread(self._files.remove, path)


class AsyncSandbox:
    def __init__(self, sandbox: Sandbox) -> None:
        self._sandbox = sandbox
        self.name = sandbox.name
        self.namespace = sandbox.namespace
        self.profile = sandbox.profile
        self.files = AsyncFiles(sandbox.files)

    @property
    def status(self) -> Mapping[str, Any]:
        return self._sandbox.status

    async def __aenter__(self) -> AsyncSandbox:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.delete()

    async def exec(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
    ) -> ExecResult:
        return await asyncio.to_thread(
            self._sandbox.exec, argv, stdin=stdin, env=env, cwd=cwd, timeout=timeout
        )

    async def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        await self.files.write(path, data, mode)

    async def read_file(self, path: str, limit: int = DEFAULT_READ_LIMIT) -> bytes:
        return await self.files.read(path, limit)

    async def start_process(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> Process:
        return await asyncio.to_thread(self._sandbox.start_process, name, argv, env=env, cwd=cwd)

    async def processes(self) -> list[Process]:
        return await asyncio.to_thread(self._sandbox.processes)

    async def stop_process(self, name: str, *, grace: float = 2.0) -> Process:
        return await asyncio.to_thread(self._sandbox.stop_process, name, grace=grace)

    async def logs(self, name: str, *, stream: str = "stdout", limit: int = LOG_BYTES) -> bytes:
        return await asyncio.to_thread(self._sandbox.logs, name, stream=stream, limit=limit)

    async def delete(self) -> None:
        await asyncio.to_thread(self._sandbox.delete)


class AsyncClient:
    def __init__(self, namespace: str | None = None, **kwargs: Any) -> None:
        self._client = Client(namespace, **kwargs)

    async def create(
        self, profile: str, name: str | None = None, namespace: str | None = None, **kwargs: Any
    ) -> AsyncSandbox:
        sandbox = await asyncio.to_thread(self._client.create, profile, name, namespace, **kwargs)
        return AsyncSandbox(sandbox)

    async def get(self, name: str, namespace: str | None = None) -> AsyncSandbox:
        return AsyncSandbox(await asyncio.to_thread(self._client.get, name, namespace))

    async def list(self, namespace: str | None = None) -> list[AsyncSandbox]:
        return [AsyncSandbox(s) for s in await asyncio.to_thread(self._client.list, namespace)]

    async def delete(self, name: str, namespace: str | None = None) -> None:
        await asyncio.to_thread(self._client.delete, name, namespace)
