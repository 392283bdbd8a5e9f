"""`openblox.AsyncClient`: the same surface as Client, for asyncio callers.

The Kubernetes calls underneath are blocking; each runs in a worker thread so the
caller's event loop never waits on the network.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

from openblox.client.limits import ExecLimits
from openblox.client.processes import LOG_BYTES, Process
from openblox.client.results import ExecResult
from openblox.client.supervised import ExecStream, OutputChunk
from openblox.client.sync import DEFAULT_READ_LIMIT, Client, Files, Sandbox


class AsyncExecStream:
    """`Sandbox.stream` for asyncio callers: `async for chunk in stream`, then `.result`."""

    def __init__(self, stream: ExecStream) -> None:
        self._stream = stream
        self._chunks: Iterator[OutputChunk] | None = None

    def __aiter__(self) -> AsyncExecStream:
        return self

    async def __anext__(self) -> OutputChunk:
        if self._chunks is None:
            self._chunks = iter(self._stream)
        # Each wait for output happens in a worker thread; the event loop stays free.
        chunk = await asyncio.to_thread(next, self._chunks, None)
        if chunk is None:
            raise StopAsyncIteration
        return chunk

    async def __aenter__(self) -> AsyncExecStream:
        return self

    async def __aexit__(self, *_: object) -> None:
        await asyncio.to_thread(self._stream.__exit__, None, None, None)

    @property
    def result(self) -> ExecResult:
        return self._stream.result


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

    async def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        for entry in await self.list():
            yield entry


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

    @property
    def pod(self) -> str:
        return self._sandbox.pod

    @property
    def exec_limits(self) -> ExecLimits:
        return self._sandbox.exec_limits

    async def refresh(self) -> AsyncSandbox:
        await asyncio.to_thread(self._sandbox.refresh)
        return self

    async def preview_url(
        self, port: int, *, ttl: float = 3600, base_url: str | None = None
    ) -> str:
        # Signing reads the key Secret and the proxy's address from the API server.
        return await asyncio.to_thread(self._sandbox.preview_url, port, ttl=ttl, base_url=base_url)

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
        output_limit: int | None = None,
    ) -> ExecResult:
        return await asyncio.to_thread(
            self._sandbox.exec,
            argv,
            stdin=stdin,
            env=env,
            cwd=cwd,
            timeout=timeout,
            output_limit=output_limit,
        )

    async def stream(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        output_limit: int | None = None,
    ) -> AsyncExecStream:
        stream = await asyncio.to_thread(
            self._sandbox.stream,
            argv,
            stdin=stdin,
            env=env,
            cwd=cwd,
            timeout=timeout,
            output_limit=output_limit,
        )
        return AsyncExecStream(stream)

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
    def __init__(
        self,
        namespace: str | None = None,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
    ) -> None:
        self._client = Client(namespace, kubeconfig=kubeconfig, context=context)
        self.namespace = self._client.namespace

    async def create(
        self,
        profile: str,
        name: str | None = None,
        namespace: str | None = None,
        *,
        idle_timeout_seconds: int | None = None,
        max_age_seconds: int | None = None,
        timeout: float = 120.0,
    ) -> AsyncSandbox:
        sandbox = await asyncio.to_thread(
            self._client.create,
            profile,
            name,
            namespace,
            idle_timeout_seconds=idle_timeout_seconds,
            max_age_seconds=max_age_seconds,
            timeout=timeout,
        )
        return AsyncSandbox(sandbox)

    async def get(self, name: str, namespace: str | None = None) -> AsyncSandbox:
        return AsyncSandbox(await asyncio.to_thread(self._client.get, name, namespace))

    async def list(self, namespace: str | None = None) -> builtins.list[AsyncSandbox]:
        return [AsyncSandbox(s) for s in await asyncio.to_thread(self._client.list, namespace)]

    async def delete(self, name: str, namespace: str | None = None) -> None:
        await asyncio.to_thread(self._client.delete, name, namespace)

    async def profiles(self) -> builtins.list[str]:
        return await asyncio.to_thread(self._client.profiles)
