"""The probe script the operator runs in a pod: it starts dmesg only when the kernel log
could change the verdict, so a gVisor pod pays for one program (sh), not two."""

import subprocess
from pathlib import Path

import pytest

from openblox.controller.boundary import probe_script
from openblox.models.boundary import classify_boundary
from openblox.models.node_preparation import split_probe_output

NODE = "6.18.44-fc-v669"
KERNEL_LOG = "[    0.000000] Linux version 6.1.62 (guest)"


def _run(tmp_path: Path, proc_version: str) -> str:
    version = tmp_path / "version"
    version.write_text(proc_version + "\n")
    proc = tmp_path / "proc"
    for part in ("self/mountinfo", "self/limits", "net/dev"):
        (proc / part).parent.mkdir(parents=True, exist_ok=True)
        (proc / part).write_text("")
    fake = tmp_path / "bin"
    fake.mkdir()
    dmesg = fake / "dmesg"
    dmesg.write_text(f"#!/bin/sh\necho '{KERNEL_LOG}'\n")
    dmesg.chmod(0o755)
    return subprocess.run(
        ["/bin/sh", "-c", probe_script(str(version), str(proc))],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": str(fake)},
    ).stdout


def _verdict(output: str) -> str | None:
    report = split_probe_output(output)
    return classify_boundary(report.release, report.kernel_log, NODE, report.version)


@pytest.mark.parametrize(
    ("proc_version", "reads_the_log", "verdict"),
    [
        ("Linux version 4.19.0-gvisor #1 SMP Sun Jan 10 15:06:54 PST 2016", False, "gvisor"),
        ("Linux version 4.4.0 #1 SMP gVisor", False, "gvisor"),
        # A release that does not name gVisor: only the kernel log can tell Kata from a
        # gVisor that hides its name, so dmesg runs, as it always did.
        ("Linux version 6.1.62 #1 SMP", True, "kata"),
        (f"Linux version {NODE} #1 SMP", True, "none"),
    ],
)
def test_dmesg_runs_only_when_the_log_can_change_the_verdict(
    tmp_path: Path, proc_version: str, reads_the_log: bool, verdict: str
) -> None:
    output = _run(tmp_path, proc_version)

    assert (KERNEL_LOG in output) is reads_the_log
    assert _verdict(output) == verdict
    # The verdict is the one the full probe (log always read) gives.
    assert _verdict(output if reads_the_log else output + KERNEL_LOG) == verdict


def test_a_flood_into_the_probes_output_decides_nothing_and_is_not_read_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What comes back is read from the pod: past the bound the stream is closed, and
    the verdict is left undecided (the pod is probed again; it is never Ready meanwhile)."""
    from collections.abc import Iterator

    from openblox.controller import boundary
    from openblox.transport import STDOUT, ExecOutput, Frame

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

    class Guarded:
        def guard_write(self) -> None:
            pass

        session = None

    monkeypatch.setattr(boundary, "ExecSocket", Flood)
    verdict = boundary.probe_boundary(Guarded(), "ns", "pod", NODE)  # type: ignore[arg-type]
    assert verdict is None
    assert closed == [True]
    assert len(sent) * 4096 * 17 <= boundary.PROBE_OUTPUT_BYTES + 4096 * 17
