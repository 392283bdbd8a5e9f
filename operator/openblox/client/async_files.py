"""`sandbox.files` for asyncio callers: the twin of `files.Files`, through the same helper.

Every operation is idempotent (a whole-file write, a read, a listing, a removal), which is
why the handle's helper runner may run one again after its stream broke.
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator
from typing import Any, Protocol

from openblox.client.errors import FileOperationError
from openblox.client.files import DEFAULT_READ_LIMIT, listing_of
from openblox.client.results import ExecResult
from openblox.names import WORKSPACE_DIR


class AsyncHelperRunner(Protocol):
    async def __call__(
        self, operation: str, *args: str, stdin: bytes | None = ..., output_limit: int | None = ...
    ) -> ExecResult: ...


class AsyncFiles:
    """Files inside the sandbox, moved as argv and stdin: no shell, so no quoting to get wrong."""

    def __init__(self, helper: AsyncHelperRunner) -> None:
        self._helper = helper

    def _check(self, result: ExecResult, path: str) -> ExecResult:
        if result.exit_code != 0:
            raise FileOperationError(path, result.stderr.decode("utf-8", "replace").strip())
        return result

    async def write(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        payload = data.encode() if isinstance(data, str) else data
        self._check(await self._helper("write", path, oct(mode), stdin=payload), path)

    async def read(self, path: str, limit: int = DEFAULT_READ_LIMIT) -> bytes:
        """The file's bytes; a file larger than `limit` raises rather than coming back cut."""
        result = self._check(await self._helper("read", path, output_limit=limit + 1), path)
        if len(result.stdout) > limit:
            raise FileOperationError(path, f"larger than the read limit of {limit} bytes")
        return result.stdout

    async def list(self, path: str = WORKSPACE_DIR) -> builtins.list[dict[str, Any]]:
        return listing_of(self._check(await self._helper("list", path), path), path)

    async def remove(self, path: str) -> None:
        self._check(await self._helper("remove", path), path)

    async def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        for entry in await self.list():
            yield entry
