"""The pure core stays pure: no cluster clients, no I/O, no reaching up a layer.

Imports are read with `ast`, so a violation is caught even in code no test executes.
"""

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[2] / "operator" / "openblox"

# Which openblox modules each pure layer may import (anything else from openblox is out).
ALLOWED_OPENBLOX_IMPORTS = {
    "models": ("openblox.names", "openblox.models"),
    "lifetime": ("openblox.names", "openblox.models", "openblox.lifetime"),
    "leadership": ("openblox.leadership",),
    "denials": ("openblox.names", "openblox.models", "openblox.lifetime", "openblox.denials"),
    "builders": (
        "openblox.names",
        "openblox.models",
        "openblox.lifetime",
        "openblox.denials",
        "openblox.builders",
    ),
    "pool": ("openblox.names", "openblox.models", "openblox.builders", "openblox.pool"),
}
FORBIDDEN = (
    "kubernetes",
    "kopf",
    "websocket",
    "requests",
    "socket",
    "ssl",
    "subprocess",
    "urllib",
    "http",
    "asyncio",
    "os",
    "pathlib",
    "shutil",
    "io",
    "importlib",
    "threading",
    "multiprocessing",
)


def imported_modules(source: str, package: str) -> Iterator[str]:
    """Absolute names of the modules `source`, a module of `package`, imports."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                yield f"{base}.{node.module}" if node.module else base
            else:
                yield node.module or ""


def file_imports(path: Path) -> Iterator[str]:
    package = ".".join(path.relative_to(PACKAGE.parent).parts[:-1])
    return imported_modules(path.read_text(), package)


def within(module: str, roots: tuple[str, ...]) -> bool:
    return any(module == root or module.startswith(f"{root}.") for root in roots)


def layer_files(layer: str) -> list[Path]:
    files = sorted((PACKAGE / layer).rglob("*.py"))
    assert files, f"no modules found under {PACKAGE / layer}"
    return files


@pytest.mark.parametrize("layer", sorted(ALLOWED_OPENBLOX_IMPORTS))
def test_pure_layers_import_nothing_that_does_io_or_talks_to_a_cluster(layer: str) -> None:
    violations = [
        f"{path.relative_to(PACKAGE.parent)} imports {module}"
        for path in layer_files(layer)
        for module in file_imports(path)
        if within(module, FORBIDDEN)
        or (within(module, ("openblox",)) and not within(module, ALLOWED_OPENBLOX_IMPORTS[layer]))
    ]
    assert violations == []


# Pure modules inside a package that also does I/O, and the openblox modules each may use.
PURE_MODULES = {
    "agent_tools/schemas.py": ("openblox.names",),
    "agent_tools/shaping.py": ("openblox.names", "openblox.agent_tools.schemas"),
}


@pytest.mark.parametrize("module", sorted(PURE_MODULES))
def test_pure_modules_import_nothing_that_does_io_or_talks_to_a_cluster(module: str) -> None:
    allowed = PURE_MODULES[module]
    violations = [
        imported
        for imported in file_imports(PACKAGE / module)
        if within(imported, (*FORBIDDEN, "mcp"))
        or (within(imported, ("openblox",)) and not within(imported, allowed))
    ]
    assert violations == []


def test_only_the_mcp_command_loads_the_mcp_sdk() -> None:
    """The SDK is an extra the operator image lacks: outside agent_tools, nothing imports it
    or agent_tools, bar `openblox mcp`'s handler, inside the function."""
    sdk = ("mcp", "openblox.agent_tools")
    violations = [
        f"{path.relative_to(PACKAGE.parent)} imports {module}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if "agent_tools" not in path.parts and path != PACKAGE / "cli" / "main.py"
        for module in file_imports(path)
        if within(module, sdk)
    ]
    cli = ast.parse((PACKAGE / "cli" / "main.py").read_text())
    top_level = [node for node in cli.body if isinstance(node, ast.Import | ast.ImportFrom)]
    violations += [
        f"cli/main.py imports {module} at module level"
        for node in top_level
        for module in imported_modules(ast.unparse(node), "openblox.cli")
        if within(module, sdk)
    ]
    assert violations == []


# The guest wing runs inside the sandbox as source text: the standard library only.
GUEST = "guest"


def outside_the_standard_library(modules: Iterator[str]) -> list[str]:
    return [m for m in modules if m.split(".")[0] not in sys.stdlib_module_names]


@pytest.mark.parametrize("path", layer_files(GUEST), ids=lambda path: path.name)
def test_guest_programs_import_only_the_standard_library(path: Path) -> None:
    assert outside_the_standard_library(file_imports(path)) == []


def test_the_guest_check_refuses_openblox_and_third_party_imports() -> None:
    source = (
        "import os\nimport ctypes.util\nfrom openblox import names\nimport yaml\nfrom . import x\n"
    )
    modules = imported_modules(source, "openblox.guest")
    assert outside_the_standard_library(modules) == ["openblox", "yaml", "openblox.guest"]


def test_names_imports_only_the_standard_library_basics() -> None:
    modules = set(file_imports(PACKAGE / "names.py"))
    assert modules <= {"enum", "typing"}


def test_the_checker_resolves_relative_imports() -> None:
    source = "from ..controller import x\nimport kubernetes.client\nfrom . import pod\n"
    assert list(imported_modules(source, "openblox.builders")) == [
        "openblox.controller",
        "kubernetes.client",
        "openblox.builders",
    ]


# The layer order, lowest first, as ARCHITECTURE.md states it in one line: a package (or
# top-level module) imports only from those before it. Register a new package here.
LAYER_ORDER = (
    "guest",
    "names",
    "models",
    "lifetime",
    "denials",
    "builders",
    "pool",
    "leadership",
    "controller",
    "client",
    "preview",
    "agent_tools",
    "conformance",
    "cli",
)
# Imports against the order that are known and named in ARCHITECTURE.md (the client's
# preview_url signs with preview.tokens and preview.keys). Allowed, not required: removing
# one is welcome.
AGAINST_THE_ORDER = {("client", "preview")}
REPO = PACKAGE.parents[1]


def top_level(path: Path) -> str:
    parts = path.relative_to(PACKAGE).parts
    return parts[0] if len(parts) > 1 else path.stem


def test_every_package_has_a_place_in_the_layer_order() -> None:
    found = {top_level(path) for path in PACKAGE.rglob("*.py")} - {"__init__"}
    assert found - set(LAYER_ORDER) == set(), "add it to LAYER_ORDER and ARCHITECTURE.md"


def test_packages_import_only_from_lower_layers() -> None:
    rank = {name: index for index, name in enumerate(LAYER_ORDER)}
    violations = []
    for path in sorted(PACKAGE.rglob("*.py")):
        importer = top_level(path)
        if importer == "__init__":
            continue  # openblox/__init__.py: the public face, above every layer
        for module in file_imports(path):
            parts = module.split(".")
            if parts[0] != "openblox" or len(parts) < 2 or parts[1] == importer:
                continue
            imported = parts[1]
            if rank.get(imported, -1) >= rank[importer] and (
                (importer, imported) not in AGAINST_THE_ORDER
            ):
                violations.append(f"{path.relative_to(PACKAGE.parent)} imports {module}")
    assert violations == []


def test_architecture_states_the_same_order_and_maps_every_folder() -> None:
    text = (REPO / "ARCHITECTURE.md").read_text()
    line = next(line for line in text.splitlines() if line.startswith("**Layer order**"))
    stated = line.split(":", 1)[1].replace("`", "").rstrip(".").split("→")
    assert tuple(name.strip() for name in stated) == LAYER_ORDER
    mapped = {row.split("|")[1].strip().strip("`") for row in text.splitlines() if "| `" in row}
    packages = {
        f"operator/openblox/{p.name}/" for p in PACKAGE.iterdir() if (p / "__init__.py").exists()
    }
    # Top-level folders of the checkout, bar hidden ones (.ci/ aside) and build output.
    folders = {
        f"{p.name}/"
        for p in REPO.iterdir()
        if p.is_dir()
        and (not p.name.startswith(".") or p.name == ".ci")
        and p.name not in {"build", "dist", "__pycache__"}
        and not p.name.endswith(".egg-info")
    }
    assert packages - mapped == set()
    assert folders - mapped == set()
