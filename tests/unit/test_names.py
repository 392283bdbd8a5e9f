"""Every name that users, manifests and code share is spelled once, in openblox/names.py.

The package's source is read with `ast`: a string literal equal to one of names.py's
values, or one that embeds a distinctive one (`openblox.sh/...`, `openblox-system`), is a
second spelling that can drift. The guest wing (openblox/guest/) runs inside the sandbox
as source text and cannot import names.py; its copies are held equal to it here instead.
YAML and the documents spell the names out on purpose, and are not read.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from enum import Enum
from pathlib import Path

from openblox import names
from openblox.client import background, processes

PACKAGE = Path(__file__).parents[2] / "operator" / "openblox"
GUEST = PACKAGE / "guest"

# Literals that equal a names.py value and are still not that name: (file, value) -> why.
NOT_NAMES_PY = {
    ("builders/pod_state.py", "Ready"): "the pod's Ready condition (Kubernetes')",
    ("denials/observed.py", "Ready"): "the pod's Ready condition (Kubernetes')",
    ("conformance/cluster_api.py", "Ready"): "the pod's Ready condition (Kubernetes')",
    ("conformance/checks/resources.py", "Ready"): "the node's Ready condition (Kubernetes')",
    # A Boundary is the kernel a probe saw; its values are spelled like the RuntimeClasses.
    ("models/boundary.py", "gvisor"): "a Boundary value",
    ("models/boundary.py", "kata"): "a Boundary value",
    ("models/profile.py", "gvisor"): "a Boundary value",
    ("models/profile.py", "kata"): "a Boundary value",
    ("controller/pod_boundaries.py", "gvisor"): "a Boundary value",
    ("controller/pod_boundaries.py", "kata"): "a Boundary value",
    ("pool/plan.py", "gvisor"): "a Boundary value",
    ("models/node_preparation.py", "gvisor"): "a Boundary value",
    ("pool/plan.py", "kata"): "a Boundary value",
    ("conformance/checks/control_plane_status.py", "kata"): "the Boundary a forger writes",
    ("controller/handlers.py", "sandbox"): "what triggered a reconcile, for its log",
    ("conformance/checks/network.py", "sandbox"): "a probe target's key in its result",
    ("conformance/checks/boundary.py", "runsc"): "a host process's name, not the handler",
    ("conformance/checks/filesystem.py", "runsc"): "a socket's name, not the handler",
}


def names_values() -> dict[str, str]:
    """Each value names.py defines -> the name it has there (constants, tuples, enums)."""
    found: dict[str, str] = {}
    for name, value in vars(names).items():
        if name.startswith("_"):
            continue
        if isinstance(value, str):
            found.setdefault(value, name)
        elif isinstance(value, tuple):
            for item in value:
                found.setdefault(item, name)
        elif (
            isinstance(value, type)
            and issubclass(value, Enum)
            and value.__module__ == names.__name__
        ):
            for member in value:
                found.setdefault(member.value, f"{name}.{member.name}")
    return found


VALUES = names_values()
# Values no ordinary word or path could be by chance: a literal must not even embed one.
DISTINCTIVE = {value: name for value, name in VALUES.items() if value.startswith("openblox")}
DISTINCTIVE.pop(names.COMMAND)  # a bare "openblox" starts many other names
EMBEDDED = re.compile(
    "|".join(
        rf"(?<![\w-]){re.escape(value)}(?![\w-])"
        for value in sorted(DISTINCTIVE, key=len, reverse=True)
    )
)


def _exempt_nodes(tree: ast.Module) -> set[int]:
    """Literals that are not a spelling of a name: docstrings, `__all__` (Python names
    that happen to match a reason), and `Literal[...]` (a type cannot name a constant)."""
    exempt: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = body[0] if body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                exempt.add(id(first.value))
        targets = node.targets if isinstance(node, ast.Assign) else []
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            exempt.update(id(child) for child in ast.walk(node))
        if isinstance(node, ast.Subscript) and (
            (isinstance(node.value, ast.Name) and node.value.id == "Literal")
            or (isinstance(node.value, ast.Attribute) and node.value.attr == "Literal")
        ):
            exempt.update(id(child) for child in ast.walk(node.slice))
    return exempt


def respellings(source: str, where: str) -> Iterator[tuple[str, int, str]]:
    """(file, line, what) for each literal in `source` that spells a names.py name."""
    tree = ast.parse(source)
    exempt = _exempt_nodes(tree)
    literals = sorted(
        (node for node in ast.walk(tree) if isinstance(node, ast.Constant)),
        key=lambda node: (node.lineno, node.col_offset),
    )
    for node in literals:
        if not isinstance(node.value, str) or id(node) in exempt:
            continue
        if node.value in VALUES:
            if (where, node.value) not in NOT_NAMES_PY:
                yield where, node.lineno, f"{node.value!r} is names.{VALUES[node.value]}"
        elif match := EMBEDDED.search(node.value):
            spelled = match.group(0)
            yield where, node.lineno, f"{spelled!r} (names.{DISTINCTIVE[spelled]}) in a literal"


def package_files() -> Iterator[tuple[str, Path]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "names.py" or GUEST in path.parents:
            continue
        yield path.relative_to(PACKAGE).as_posix(), path


def test_no_module_spells_a_name_that_names_py_defines() -> None:
    found = [
        f"operator/openblox/{where}:{line}: {what}; use openblox.names"
        for relative, path in package_files()
        for where, line, what in respellings(path.read_text(), relative)
    ]
    assert not found, "\n".join(found)


def test_every_allowance_is_still_used() -> None:
    """An allowance no literal needs any more goes, so it cannot hide a new spelling."""
    used = {
        (relative, node.value)
        for relative, path in package_files()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }
    assert set(NOT_NAMES_PY) - used == set()


def test_the_check_finds_a_spelling_and_names_its_line() -> None:
    source = (
        '"""Docstrings may say openblox.sh/sandbox."""\n'
        "from typing import Literal\n"
        '__all__ = ["Expired"]\n'
        'Kind = Literal["Sandbox"]\n'
        'LABEL = "openblox.sh/sandbox"\n'
        'URL = f"http://x.openblox-system.svc/{LABEL}"\n'
        'PATH = "/apis/openblox.sh/v1alpha1/sandboxes"\n'
        'MESSAGE = "see openblox-systemd and my-openblox-pools"\n'
    )
    assert list(respellings(source, "x.py")) == [
        ("x.py", 5, "'openblox.sh/sandbox' is names.LABEL_SANDBOX"),
        ("x.py", 6, "'openblox-system' (names.OPERATOR_NAMESPACE) in a literal"),
        ("x.py", 7, "'openblox.sh/v1alpha1' (names.API_VERSION) in a literal"),
    ]


def _guest_constant(module: str, name: str) -> object:
    """A module-level constant of a guest program, read without running the program."""
    tree = ast.parse((GUEST / module).read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            return ast.literal_eval(node.value)
    raise AssertionError(f"guest/{module} has no constant {name}")


def test_the_guests_copies_equal_names_py() -> None:
    assert _guest_constant("supervisor.py", "STATE_DIR") == f"{names.STATE_DIR}/processes"
    # The supervisor's bound on its answers and its exit codes, as the client reads them.
    assert _guest_constant("supervisor.py", "ANSWER_BYTES") == processes.ANSWER_BYTES
    assert _guest_constant("supervisor.py", "NO_SUCH_PROCESS") == background.NO_SUCH_PROCESS
    assert _guest_constant("supervisor.py", "DAMAGED") == background.DAMAGED
    assert _guest_constant("probe.py", "WRITABLE_PLACES") == (
        names.STATE_DIR,
        names.TMP_DIR,
        names.WORKSPACE_DIR,
    )
