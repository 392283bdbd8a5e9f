"""The build caches are keyed by content: the same tree at two paths gives the same keys.

A key that carried the checkout's absolute path made every fresh clone at a new path
rebuild the kind node images (cluster/kind/node-image.sh hashes cluster/kind/node/...).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _hash_lines(checkout: Path, *files: str) -> str:
    script = (
        f'IMAGES_DIR="{checkout}/cluster/images"; source "$IMAGES_DIR/lib.sh"; '
        'hash_files "$@"; hash_dir "$IMAGES_DIR/../kind/node"'
    )
    return subprocess.run(
        ["bash", "-c", script, "keys", *(str(checkout / f) for f in files)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def test_hash_lines_are_the_same_for_the_same_tree_at_two_paths(tmp_path: Path) -> None:
    trees = []
    for name in ("one", "elsewhere/two"):
        checkout = tmp_path / name
        shutil.copytree(REPO / "cluster", checkout / "cluster")
        trees.append(checkout)
    files = ("cluster/kind/node/packages", "cluster/images/lib.sh", "cluster/runsc-shim.toml")
    first, second = (_hash_lines(checkout, *files) for checkout in trees)
    assert first == second
    assert str(tmp_path) not in first
    assert "  cluster/kind/node/packages\n" in first and "  lib.sh\n" in first


def test_a_changed_file_changes_its_hash_line(tmp_path: Path) -> None:
    checkout = tmp_path / "tree"
    shutil.copytree(REPO / "cluster", checkout / "cluster")
    before = _hash_lines(checkout, "cluster/kind/node/packages")
    with (checkout / "cluster/kind/node/packages").open("a") as packages:
        packages.write("# one more line\n")
    assert _hash_lines(checkout, "cluster/kind/node/packages") != before
