"""What an exec returns."""

from __future__ import annotations

from dataclasses import dataclass, field

from openblox.denials import Denial


@dataclass(frozen=True)
class ExecResult:
    stdout: bytes
    stderr: bytes
    exit_code: int
    timed_out: bool
    truncated: bool
    duration: float
    denials: tuple[Denial, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    @property
    def text(self) -> str:
        """stdout decoded for display; bytes that are not UTF-8 are shown, not lost."""
        return self.stdout.decode("utf-8", "replace")
