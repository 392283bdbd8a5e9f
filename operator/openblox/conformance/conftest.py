"""pytest plumbing for ``pytest --pyargs openblox.conformance``.

Settings come from ``OPENBLOX_CONFORMANCE_*`` environment variables (see settings.py):
pytest's own options cannot be added by a conftest that ``--pyargs`` reaches only at
collection. One session runs every selected property against every profile; the
scorecard (JSON and Markdown) is written at the end to ``OPENBLOX_CONFORMANCE_OUT`` or
a temporary directory, and its path is printed in the summary.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from openblox.conformance.runner import ConformanceRun
from openblox.conformance.scorecard import slug
from openblox.conformance.settings import Settings

_written: list[Path] = []


@pytest.fixture(scope="session")
def conformance() -> Iterator[ConformanceRun]:
    settings = Settings.from_environment()
    session = ConformanceRun(settings)
    try:
        yield session
    finally:
        card = session.close()
        out = settings.out or tempfile.mkdtemp(prefix="openblox-conformance-")
        stem = slug("-".join(t.name for t in card.targets)) or "scorecard"
        _written.extend(card.write(out, stem))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _written:
        terminalreporter.write_line("conformance scorecard: " + " ".join(map(str, _written)))
