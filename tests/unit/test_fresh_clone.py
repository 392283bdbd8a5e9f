"""A fresh clone runs its unit tests before `make install` has built anything, and
collects its cluster tests before their fixtures build the images, so no module may need
a build when it is imported: the first cold CI runs found the benchmark's profiles and
two cluster test modules reading the sandbox image's digest at import time."""

from __future__ import annotations

import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import bench
import bench.sections

REPO = Path(__file__).resolve().parents[2]


def _modules() -> list[str]:
    found = ["bench.runner"]
    for package in (bench, bench.sections):
        found += [
            f"{package.__name__}.{module.name}"
            for module in pkgutil.iter_modules(package.__path__)
            if module.name != "__main__"  # runs the benchmark's command line
        ]
    return sorted(set(found))


def test_every_bench_module_imports_with_nothing_built(tmp_path: Path) -> None:
    modules = _modules()
    assert "bench.sections.pool" in modules
    program = "import importlib, sys\nfor name in sys.argv[1:]:\n  importlib.import_module(name)\n"
    env = {**os.environ, "OPENBLOX_CACHE": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-c", program, *modules],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]


def test_the_cluster_tests_are_collected_with_nothing_built(tmp_path: Path) -> None:
    """`make test` collects the cluster tests before their fixtures start the cluster
    (which builds the images), so nothing at a test module's top may need a build."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "--collect-only",
            "-q",
            "tests/cluster",
            "tests/kind",
        ],
        cwd=REPO,
        env={**os.environ, "OPENBLOX_CACHE": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
