"""The checks on what a caller passes: every value refused here with InvalidArgument is
one that would otherwise reach the sandbox as something else, or fail deep inside the
client with a TypeError that says nothing about the call."""

from __future__ import annotations

import builtins
import math
from collections.abc import Mapping, Sequence

from openblox.client.errors import InvalidArgument


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _is_whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def checked_argv(argv: object) -> builtins.list[str]:
    """A program and its arguments: a non-empty list of strings, none holding a NUL."""
    if isinstance(argv, str | bytes) or not isinstance(argv, Sequence) or not argv:
        raise InvalidArgument("argv must be a non-empty sequence of strings, not a shell string")
    for index, part in enumerate(argv):
        if not isinstance(part, str):
            raise InvalidArgument(f"argv[{index}] must be a string, not {type(part).__name__}")
        if "\0" in part:
            raise InvalidArgument(f"argv[{index}] holds a NUL byte, which no program can receive")
    return list(argv)


def checked_limits(
    timeout: float | None, output_limit: int | None, max_timeout: float, max_output: int
) -> tuple[float, int]:
    """A call's (timeout, output cap): the profile's, or lower; never higher, never nonsense."""
    if timeout is None:
        timeout = max_timeout
    elif not (_is_number(timeout) and timeout > 0):
        raise InvalidArgument(f"timeout must be a positive number of seconds, not {timeout!r}")
    elif timeout > max_timeout:
        raise InvalidArgument(f"timeout {timeout}s is above the profile's {max_timeout:.0f}s")
    if output_limit is None:
        output_limit = max_output
    elif not _is_whole(output_limit) or output_limit < 0:
        raise InvalidArgument(f"output_limit must be a whole number of bytes, not {output_limit!r}")
    elif output_limit > max_output:
        raise InvalidArgument(f"output_limit {output_limit} is above the profile's {max_output}")
    return float(timeout), output_limit


def env_pairs(env: Mapping[str, str] | None) -> builtins.list[str]:
    if env is None:
        return []
    if not isinstance(env, Mapping):
        raise InvalidArgument(f"env must be a mapping of names to values, not {type(env).__name__}")
    pairs = []
    for key, value in env.items():
        if not isinstance(key, str) or not key or "=" in key or "\0" in key:
            raise InvalidArgument(f"environment variable name {key!r} is not valid")
        if not isinstance(value, str) or "\0" in value:
            raise InvalidArgument(
                f"environment variable {key} must have a string value without NUL"
            )
        pairs.append(f"{key}={value}")
    return pairs


def checked_cwd(cwd: object) -> str:
    if cwd is None:
        return ""
    if not isinstance(cwd, str) or "\0" in cwd:
        raise InvalidArgument(f"cwd must be a path, not {cwd!r:.80}")
    return cwd


def checked_stdin(stdin: object) -> bytes | None:
    if stdin is None or isinstance(stdin, bytes):
        return stdin
    if isinstance(stdin, str):
        return stdin.encode()
    raise InvalidArgument(f"stdin must be bytes or a string, not {type(stdin).__name__}")


def checked_grace(grace: object) -> float:
    if not (_is_number(grace) and grace >= 0):  # type: ignore[operator]
        raise InvalidArgument(f"grace must be a number of seconds, 0 or more, not {grace!r:.80}")
    return float(grace)  # type: ignore[arg-type]


def checked_byte_count(name: str, value: object) -> int:
    if not _is_whole(value) or value < 0:  # type: ignore[operator]
        raise InvalidArgument(f"{name} must be a whole number of bytes, not {value!r:.80}")
    return value  # type: ignore[return-value]


def checked_port(port: object) -> int:
    if not _is_whole(port) or not 1 <= port <= 65535:  # type: ignore[operator]
        raise InvalidArgument(f"port {port!r:.80} is not in 1..65535")
    return port  # type: ignore[return-value]


def checked_ttl(ttl: object, most: float) -> float:
    if not (_is_number(ttl) and 0 < ttl <= most):  # type: ignore[operator]
        raise InvalidArgument(f"ttl must be in (0, {most:.0f}] seconds, not {ttl!r:.80}")
    return float(ttl)  # type: ignore[arg-type]
