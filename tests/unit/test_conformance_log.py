"""conformance/run.sh's reading of a Job log, where stdout and stderr are interleaved."""

import json
import subprocess
from pathlib import Path

from openblox.conformance.__main__ import LOG_PREFIX

RUN_SH = Path(__file__).resolve().parents[2] / "conformance" / "run.sh"
SCORECARD = {"targets": [{"name": "operator/code-exec"}], "results": [{"id": "NET-001"}]}


def _parse(log: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(RUN_SH), "--parse-log"], input=log, capture_output=True, text=True, check=True
    )


def test_a_summary_line_inside_the_scorecard_goes_to_stderr() -> None:
    lines = [LOG_PREFIX + line for line in json.dumps(SCORECARD, indent=2).splitlines()]
    # What the embedded cluster's Job log had: the stderr summary among the JSON lines.
    lines.insert(4, "operator/code-exec: 55 pass, 0 fail, 0 unsupported in 412s")
    log = "\n".join(["NET-001 pass", *lines]) + "\n"

    parsed = _parse(log)

    assert json.loads(parsed.stdout) == SCORECARD
    assert parsed.stderr.splitlines() == [
        "NET-001 pass",
        "operator/code-exec: 55 pass, 0 fail, 0 unsupported in 412s",
    ]


def test_a_log_without_a_scorecard_gives_nothing_on_stdout() -> None:
    parsed = _parse("the suite could not start\n")

    assert parsed.stdout == ""
    assert parsed.stderr == "the suite could not start\n"
