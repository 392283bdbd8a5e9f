"""`sandbox.files`: files inside the sandbox, moved as argv and stdin through the file helper.

No shell, so no quoting to get wrong. Every operation is idempotent (a whole-file write,
a read, a listing, a removal), which is why the helper may run one again after its
stream broke (`SandboxSteps.helper` does, once). The calls are plans (`effects`), for
both clients' `files`.
"""

from __future__ import annotations

import builtins
import json
from typing import Any, Protocol

from openblox.client.effects import Plan
from openblox.client.errors import FileOperationError
from openblox.client.results import ExecResult
from openblox.names import WORKSPACE_DIR

# Files move through the exec stream, not the command output cap; this bounds memory.
DEFAULT_READ_LIMIT = 256 * 1024 * 1024


def listing_of(result: ExecResult, path: str) -> builtins.list[dict[str, Any]]:
    """The helper's listing, a JSON object a line. One cut at the output cap, or holding
    anything else, is refused with the path, never half-read or guessed at."""
    if result.truncated:
        raise FileOperationError(path, "the listing is longer than the output cap")
    entries = []
    for line in result.stdout.splitlines():
        try:
            entry = json.loads(line) if line else {}
        except (ValueError, RecursionError):
            entry = None
        if not isinstance(entry, dict):
            raise FileOperationError(path, "the listing is malformed")
        if entry:
            entries.append(entry)
    return entries


class HelperRunner(Protocol):
    def __call__(
        self, operation: str, *args: str, stdin: bytes | None = ..., output_limit: int | None = ...
    ) -> Plan[ExecResult]: ...


def _checked(result: ExecResult, path: str) -> ExecResult:
    if result.exit_code != 0:
        said = result.stderr.decode("utf-8", "replace").strip()
        # The helper names every failure it sees; one that ends without a word was ended
        # from outside (a kill), and the caller is told that much rather than nothing.
        raise FileOperationError(
            path, said or f"the file helper ended with exit {result.exit_code} and no message"
        )
    return result


class FileSteps:
    """Files inside the sandbox, moved as argv and stdin: no shell, so no quoting to get wrong."""

    def __init__(self, helper: HelperRunner) -> None:
        self._helper = helper

    def write(self, path: str, data: bytes | str, mode: int = 0o644) -> Plan[None]:
        payload = data.encode() if isinstance(data, str) else data
        _checked((yield from self._helper("write", path, oct(mode), stdin=payload)), path)

    def read(self, path: str, limit: int = DEFAULT_READ_LIMIT) -> Plan[bytes]:
        """The file's bytes; a file larger than `limit` raises rather than coming back cut."""
        result = _checked((yield from self._helper("read", path, output_limit=limit + 1)), path)
        if len(result.stdout) > limit:
            raise FileOperationError(path, f"larger than the read limit of {limit} bytes")
        return result.stdout

    def list(self, path: str = WORKSPACE_DIR) -> Plan[builtins.list[dict[str, Any]]]:
        return listing_of(_checked((yield from self._helper("list", path)), path), path)

    def remove(self, path: str) -> Plan[None]:
        _checked((yield from self._helper("remove", path)), path)
