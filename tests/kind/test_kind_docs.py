"""docs/kind.md's blocks, run against the kind cluster the way test_docs_commands runs the
other documents' blocks against the embedded one."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cluster.kubectl import Kube
from tests.cluster.test_docs_commands import run_document
from tests.unit.test_docs import KIND_DOCUMENTS, blocks

pytestmark = pytest.mark.kind


@pytest.mark.parametrize("path", KIND_DOCUMENTS, ids=lambda p: p.name)
def test_kind_document_commands_run(kind_operator: Kube, path: Path, tmp_path: Path) -> None:
    assert any(block.runs for block in blocks(path)), f"{path.name} has no block to run"
    run_document(kind_operator, path, tmp_path)
