"""Every block the documents mark `<!-- test: run -->` or `<!-- test: output -->` runs here,
on the real cluster, with the operator installed from manifests/.

The blocks of one document run in order in one bash process (`set -euo pipefail`, from
the repository's root), the way a reader follows the document in one terminal: with
KUBECONFIG pointing at the cluster and PATH holding the node's binaries
(/var/lib/openblox/bin: kubectl, crictl) and this project's virtualenv (`openblox`).
Python blocks run with this interpreter. The namespace the documents use,
`openblox-demo`, is made and opted in first, as `make up` does; Sandboxes a document
leaves behind there are deleted afterwards. The convention itself is described in
tests/unit/test_docs.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import embedded
from tests.cluster.kubectl import Kube
from tests.unit.test_docs import (
    REPO,
    Block,
    blocks,
    documents_with_runnable_blocks,
    expected_output,
    script_of,
)

pytestmark = pytest.mark.cluster

DEMO_NAMESPACE = embedded.DEMO_NAMESPACE
# Runnable blocks are meant to take seconds; a document gets this long in all.
DOCUMENT_TIMEOUT_SECONDS = 420


def _sandboxes(kube: Kube) -> set[str]:
    out = kube.kubectl("get", "sandboxes", "-n", DEMO_NAMESPACE, "-o", "json", check=False)
    if out.returncode != 0:
        return set()
    return {item["metadata"]["name"] for item in json.loads(out.stdout)["items"]}


def _script(runnable: list[Block], out: Path) -> str:
    lines = ["set -euo pipefail", f"cd {json.dumps(str(REPO))}"]
    for number, block in enumerate(runnable):
        lines += [
            f': > "{out}/{number}.started"',
            "{",
            script_of(block).rstrip("\n"),
            f'}} > "{out}/{number}.out"',
            f': > "{out}/{number}.done"',
        ]
    return "\n".join(lines) + "\n"


def run_document(kube: Kube, path: Path, tmp_path: Path) -> None:
    """Run the document's blocks in one shell against kube's cluster; fail on any problem."""
    embedded.ensure_demo_namespace(kube.kubeconfig)
    before = _sandboxes(kube)
    runnable = [block for block in blocks(path) if block.runs]
    script = tmp_path / "document.sh"
    script.write_text(_script(runnable, tmp_path))
    process = subprocess.Popen(
        ["bash", "--noprofile", "--norc", str(script)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=_environment(kube),
        start_new_session=True,
    )
    try:
        log, _ = process.communicate(timeout=DOCUMENT_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        log, _ = process.communicate()
    finally:
        for name in _sandboxes(kube) - before:
            kube.kubectl(
                "delete", "sandbox", name, "-n", DEMO_NAMESPACE, "--wait=false", check=False
            )

    started = [n for n in range(len(runnable)) if (tmp_path / f"{n}.started").exists()]
    done = [n for n in range(len(runnable)) if (tmp_path / f"{n}.done").exists()]
    if len(done) < len(runnable):
        failed = runnable[started[-1]] if started else runnable[0]
        stdout_file = tmp_path / f"{started[-1] if started else 0}.out"
        stdout = stdout_file.read_text() if stdout_file.exists() else ""
        pytest.fail(
            f"{failed.where} failed (exit {process.returncode}; "
            f"{len(done)} of {len(runnable)} blocks of the document ran):\n"
            f"--- block ---\n{failed.text}--- its stdout ---\n{stdout}"
            f"--- stderr of the document's shell ---\n{log[-4000:]}"
        )
    mismatches = []
    for number, block in enumerate(runnable):
        if block.action != "output":
            continue
        actual = _normalise((tmp_path / f"{number}.out").read_text())
        if actual != expected_output(block):
            mismatches.append(
                f"{block.where}: the document shows\n{expected_output(block)}\n"
                f"but the commands printed\n{actual}"
            )
    assert not mismatches, "\n\n".join(mismatches)


def _environment(kube: Kube) -> dict[str, str]:
    path = os.pathsep.join(
        [str(embedded.NODE_BIN), str(Path(sys.executable).parent), os.environ.get("PATH", "")]
    )
    return {
        **os.environ,
        "KUBECONFIG": kube.kubeconfig,
        "PATH": path,
        "OPENBLOX_DOCS_PYTHON": sys.executable,
    }


def _normalise(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.splitlines()).strip("\n")


@pytest.mark.parametrize(
    "path", documents_with_runnable_blocks(), ids=lambda p: str(p.relative_to(REPO))
)
def test_document_commands_run(operator: Kube, path: Path, tmp_path: Path) -> None:
    run_document(operator, path, tmp_path)
