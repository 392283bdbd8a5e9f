"""No module of the package is over 400 lines, bar the guest wing (issue 13).

A module that long has grown a second job: split it by concern. The guest wing is sent
into the sandbox as source text, one file a program, so its files may be larger (each
says why at its top).
"""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).parents[2] / "operator" / "openblox"
GUEST = PACKAGE / "guest"
MAX_LINES = 400


def too_long(paths: list[Path], root: Path, limit: int = MAX_LINES) -> list[str]:
    """`path: N lines` (relative to `root`) for each file over `limit` lines."""
    found = []
    for path in paths:
        lines = len(path.read_text().splitlines())
        if lines > limit:
            found.append(f"{path.relative_to(root)}: {lines} lines")
    return found


def test_no_module_outside_the_guest_wing_is_over_400_lines() -> None:
    modules = [path for path in sorted(PACKAGE.rglob("*.py")) if GUEST not in path.parents]
    assert modules, f"no modules found under {PACKAGE}"
    found = too_long(modules, PACKAGE.parent)
    assert not found, f"over {MAX_LINES} lines, split by concern: {'; '.join(found)}"


def test_the_size_check_names_the_file_and_its_line_count(tmp_path: Path) -> None:
    (tmp_path / "long.py").write_text("x = 1\n" * 401)
    (tmp_path / "short.py").write_text("x = 1\n" * 400)
    files = sorted(tmp_path.glob("*.py"))
    assert too_long(files, tmp_path) == ["long.py: 401 lines"]
