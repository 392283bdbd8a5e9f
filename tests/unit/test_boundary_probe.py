"""The boundary probe the operator runs in a pod: one program (`cat`) for a kernel that
names itself, and `dmesg` in a second exec only when the kernel log could change the
verdict. The exec socket is replaced by one that answers as the pod would (what the real
exec prints is checked on the cluster, tests/cluster/test_node_preparation.py)."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from openblox.controller import boundary
from openblox.models.node_preparation import NodeRequirements
from openblox.transport import ERROR, STDOUT, ExecOutput, Frame

NODE = "6.18.44-fc-v669"
KERNEL_LOG = "[    0.000000] Linux version 6.1.62 (guest)"
PREPARED = (Path(__file__).parent / "data" / "probe" / "gvisor-prepared.txt").read_text()
SUCCESS = b'{"metadata":{},"status":"Success"}'


class _Guarded:
    session = None

    def guard_write(self) -> None:
        pass


def _pod_answering(
    monkeypatch: pytest.MonkeyPatch, proc_version: str, status: bytes = SUCCESS
) -> list[list[str]]:
    """Replaces the exec socket with a pod whose /proc/version is `proc_version`; the
    commands run in it are returned as they come."""
    commands: list[list[str]] = []
    rest = PREPARED.partition("\n")[2]

    class Pod:
        def __init__(
            self, _session: object, _ns: str, _pod: str, _c: str, command: list[str], **_: object
        ) -> None:
            commands.append(command)
            self.command = command

        def read_to_end(self, deadline: float, output: ExecOutput) -> ExecOutput:
            printed = f"{proc_version}\n{rest}" if self.command[0] == "cat" else KERNEL_LOG
            output.feed(Frame(STDOUT, printed.encode()))
            output.feed(Frame(ERROR, status))
            return output

    monkeypatch.setattr(boundary, "ExecSocket", Pod)
    return commands


@pytest.mark.parametrize(
    ("proc_version", "reads_the_log", "verdict"),
    [
        ("Linux version 4.19.0-gvisor #1 SMP Sun Jan 10 15:06:54 PST 2016", False, "gvisor"),
        ("Linux version 4.4.0 #1 SMP gVisor", False, "gvisor"),
        # A release that does not name gVisor: only the kernel log can tell Kata from a
        # gVisor that hides its name, so dmesg runs, as it always did.
        ("Linux version 6.1.62 #1 SMP", True, "kata"),
        (f"Linux version {NODE} #1 SMP", False, "none"),
    ],
)
def test_dmesg_runs_only_when_the_log_can_change_the_verdict(
    monkeypatch: pytest.MonkeyPatch, proc_version: str, reads_the_log: bool, verdict: str
) -> None:
    commands = _pod_answering(monkeypatch, proc_version)
    found = boundary.probe_boundary(_Guarded(), "ns", "pod", NODE)  # type: ignore[arg-type]
    assert found is not None
    assert found.boundary == verdict
    expected = [list(boundary.PROBE_COMMAND)]
    if reads_the_log:
        expected.append(list(boundary.KERNEL_LOG_COMMAND))
    assert commands == expected


def test_a_probe_that_did_not_exit_cleanly_is_never_taken_for_a_prepared_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`cat` that failed on a file (or a stream that ended before its Status) printed
    less than the probe must see, whatever did come."""
    failed = b'{"status":"Failure","details":{"causes":[{"reason":"ExitCode","message":"1"}]}}'
    _pod_answering(monkeypatch, PREPARED.partition("\n")[0], failed)
    needs = NodeRequirements(mount_bytes={}, processes=256, only_loopback=True)
    found = boundary.probe_boundary(_Guarded(), "ns", "pod", NODE, needs)  # type: ignore[arg-type]
    assert found is not None
    assert found.unmet == ("the probe's output was cut short",)


def test_a_flood_into_the_probes_output_decides_nothing_and_is_not_read_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What comes back is read from the pod: past the bound the stream is closed, and
    the verdict is left undecided (the pod is probed again; it is never Ready meanwhile)."""
    sent: list[int] = []
    closed: list[bool] = []

    class Flood:
        def __init__(self, *_args: object, **_kwargs: object) -> None:
            pass

        def frames(self, deadline: float) -> Iterator[Frame]:
            while True:
                sent.append(1)
                yield Frame(STDOUT, b"4.4.0 --- gVisor " * 4096)

        def read_to_end(self, deadline: float, output: ExecOutput) -> object:
            try:
                for frame in self.frames(deadline):
                    output.feed(frame)
            finally:
                closed.append(True)
            return output

    monkeypatch.setattr(boundary, "ExecSocket", Flood)
    verdict = boundary.probe_boundary(_Guarded(), "ns", "pod", NODE)  # type: ignore[arg-type]
    assert verdict is None
    assert closed == [True]
    assert len(sent) * 4096 * 17 <= boundary.PROBE_OUTPUT_BYTES + 4096 * 17
