"""The limits a Sandbox's commands run under, as the operator published them in its status."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# The profile defaults, for a status written before the operator published its limits.
DEFAULT_TIMEOUT_SECONDS = 60.0
DEFAULT_OUTPUT_BYTES = 1 << 20
DEFAULT_PROCESS_CAP = 256


@dataclass(frozen=True)
class ExecLimits:
    """The profile's exec limits: a call may lower the timeout and the output cap, never
    raise them; the process cap holds for every command and background process."""

    timeout_seconds: float
    output_bytes: int
    processes: int

    @classmethod
    def from_status(cls, status: Mapping[str, Any]) -> ExecLimits:
        """From `status.execLimits`; a missing process cap gets the default, never none."""
        limits = status.get("execLimits") or {}
        return cls(
            timeout_seconds=float(limits.get("timeoutSeconds", DEFAULT_TIMEOUT_SECONDS)),
            output_bytes=int(limits.get("outputBytes", DEFAULT_OUTPUT_BYTES)),
            processes=int(limits.get("processes") or DEFAULT_PROCESS_CAP),
        )
