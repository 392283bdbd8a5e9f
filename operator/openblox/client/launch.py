"""The argv that starts the in-sandbox supervisor and file helper: pure, from their limits."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from openblox import guest
from openblox.client.arguments import checked_cwd, env_pairs

_SUPERVISOR = guest.source(guest.SUPERVISOR)
_FILE_HELPER = guest.source(guest.FILE_HELPER)
# -I: no working directory or user site on sys.path, so a file the guest wrote cannot
# stand in for a standard module; -S: no `site`, which costs start-up time.
HELPER_PYTHON = ("python3", "-I", "-S", "-c")
SUPERVISOR_ARGV = (*HELPER_PYTHON, _SUPERVISOR)
FILE_HELPER_ARGV = (*HELPER_PYTHON, _FILE_HELPER)
# The same `run` in C (guest/supervise.c), where the image ships it: no Python start-up.
NATIVE_SUPERVISOR = "/usr/libexec/openblox/supervise"


def run_arguments(
    timeout: float,
    output_cap: int,
    process_cap: int,
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
) -> list[str]:
    """The supervisor's `run` mode for argv (after the supervisor's own argv)."""
    return [
        "run",
        repr(float(timeout)),
        str(output_cap),
        str(process_cap),
        checked_cwd(cwd),
        *env_pairs(env),
        "--",
        *argv,
    ]
