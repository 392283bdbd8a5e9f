"""The pure core stays pure: no cluster clients, no I/O, no reaching up a layer.

Imports are read with `ast`, so a violation is caught even in code no test executes.
"""

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[2] / "operator" / "openblox"

# Which openblox modules each pure layer may import (anything else from openblox is out).
# `openblox.names` and `openblox.timestamps` are the base every layer may use.
BASE = ("openblox.names", "openblox.timestamps")
ALLOWED_OPENBLOX_IMPORTS = {
    "models": (*BASE, "openblox.models"),
    "lifetime": (*BASE, "openblox.models", "openblox.lifetime"),
    "leadership": ("openblox.leadership",),
    "denials": (*BASE, "openblox.models", "openblox.lifetime", "openblox.denials"),
    "builders": (
        *BASE,
        "openblox.models",
        "openblox.lifetime",
        "openblox.denials",
        "openblox.builders",
    ),
    "pool": (*BASE, "openblox.models", "openblox.builders", "openblox.pool"),
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
TRANSPORT_CORE = ("openblox.transport.errors", "openblox.transport.frames")
# What the client's plans may use: the pure layers, the transport's pure core, the client's
# own pure modules, and the preview tokens links are signed with (the one import against
# the layer order, named in ARCHITECTURE.md).
CLIENT_PURE = tuple(
    f"openblox.client.{name}"
    for name in (
        "arguments",
        "errors",
        "launch",
        "limits",
        "postmortem",
        "processes",
        "readiness",
        "results",
        "effects",
        "cluster",
        "client_steps",
        "sandbox_steps",
        "findings",
        "supervised",
        "files",
        "background",
        "preview",
    )
)
CLIENT_PLANS = (
    *BASE,
    "openblox.denials",
    *TRANSPORT_CORE,
    "openblox.transport.rest",
    *CLIENT_PURE,
    "openblox.preview.keys",
    "openblox.preview.tokens",
)
PURE_MODULES = {
    "agent_tools/schemas.py": ("openblox.names",),
    "agent_tools/shaping.py": (
        "openblox.names",
        "openblox.denials",
        "openblox.agent_tools.schemas",
    ),
    # The transport's I/O-free core, which an asyncio transport builds on as well.
    "transport/errors.py": (),
    # ExecOutput refuses a channel past its limit with the transport's own error.
    "transport/frames.py": ("openblox.transport.errors",),
    "transport/rest.py": TRANSPORT_CORE,
    "transport/credentials.py": ("openblox.timestamps", *TRANSPORT_CORE),
    # The client's pure parts: why an exec broke, when a Sandbox is ready, its limits.
    "client/postmortem.py": (*BASE, "openblox.denials", "openblox.transport.frames"),
    "client/readiness.py": ("openblox.names",),
    "client/limits.py": (),
    # The client's plans (ADR 0017): every decision of `Client` and `AsyncClient`, written
    # once and free of I/O; only `sync_io` and `async_io` perform what they ask.
    **dict.fromkeys(
        (
            "client/effects.py",
            "client/cluster.py",
            "client/client_steps.py",
            "client/sandbox_steps.py",
            "client/findings.py",
            "client/supervised.py",
            "client/files.py",
            "client/background.py",
            "client/preview.py",
        ),
        CLIENT_PLANS,
    ),
}


# String functions only, though their packages do I/O elsewhere.
PURE_STANDARD_LIBRARY = ("urllib.parse",)


@pytest.mark.parametrize("module", sorted(PURE_MODULES))
def test_pure_modules_import_nothing_that_does_io_or_talks_to_a_cluster(module: str) -> None:
    allowed = PURE_MODULES[module]
    violations = [
        imported
        for imported in file_imports(PACKAGE / module)
        if (within(imported, (*FORBIDDEN, "mcp")) and imported not in PURE_STANDARD_LIBRARY)
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


def test_timestamps_import_only_the_standard_library_basics() -> None:
    modules = set(file_imports(PACKAGE / "timestamps.py"))
    assert modules <= {"__future__", "re", "datetime"}


def test_the_transport_loads_neither_the_kubernetes_package_nor_the_client() -> None:
    """The operator and the preview proxy use it without either."""
    violations = [
        f"{path.relative_to(PACKAGE.parent)} imports {module}"
        for path in layer_files("transport")
        for module in file_imports(path)
        if within(module, ("kubernetes", "kopf"))
        or (within(module, ("openblox",)) and not within(module, TRANSPORT_ALLOWED))
    ]
    assert violations == []


def test_no_shipped_module_imports_the_kubernetes_package() -> None:
    """One road to the API server (ADR 0018): the operator, the client, the preview proxy
    and the conformance suite all go through `openblox.transport`. The `kubernetes`
    package is not a dependency of `openblox`; only the benchmarks' `bench` extra installs
    it, to measure it against the others."""
    violations = [
        f"{path.relative_to(PACKAGE.parent)} imports {module}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for module in file_imports(path)
        if within(module, ("kubernetes", "kubernetes_asyncio"))
    ]
    assert violations == []


# What `pip install openblox` (no extra) must be enough for, and what only an extra brings.
CLIENT_INSTALL_MODULES = (
    "openblox",
    "openblox.client",
    "openblox.cli.main",
    "openblox.conformance.__main__",
    "openblox.conformance.runner",
    "openblox.conformance.backends.operator",
    "openblox.conformance.backends.bare_runc",
    "openblox.conformance.checks",
)
NOT_IN_THE_CLIENT_INSTALL = ("kopf", "prometheus_client", "kubernetes")


def test_the_client_cli_and_conformance_load_without_the_operator_extra() -> None:
    """A client's install carries neither kopf nor prometheus-client (the `operator` extra)
    nor `kubernetes` (the `bench` extra): what it runs must import without them."""
    program = (
        "import importlib, sys\n"
        f"for name in {NOT_IN_THE_CLIENT_INSTALL!r}:\n"
        "    sys.modules[name] = None  # import raises ImportError\n"
        f"for module in {CLIENT_INSTALL_MODULES!r}:\n"
        "    importlib.import_module(module)\n"
    )
    ran = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120, check=False
    )
    assert ran.returncode == 0, ran.stderr[-2000:]


# The base (names, timestamps): the client's name is its default user agent.
TRANSPORT_ALLOWED = ("openblox.transport", *BASE)


def test_the_checker_resolves_relative_imports() -> None:
    source = "from ..controller import x\nimport kubernetes.client\nfrom . import pod\n"
    assert list(imported_modules(source, "openblox.builders")) == [
        "openblox.controller",
        "kubernetes.client",
        "openblox.builders",
    ]


# ------------------------------------------------------------------ one transport

REPOSITORY = PACKAGE.parents[1]
# The client-library benchmark measures the `kubernetes` package, lightkube and kr8s, each
# loading its configuration its own way: that loading is the thing it measures.
MEASURES_OTHER_LIBRARIES = REPOSITORY / "bench" / "sections" / "client_library.py"
KUBERNETES_LOADERS = {
    "load_kube_config",
    "load_incluster_config",
    "load_config",
    "new_client_from_config",
    "list_kube_config_contexts",
}
# Where credentials live: only the transport's discovery may name these places.
CREDENTIAL_PLACES = (".kube/config", "kubernetes.io/serviceaccount")


def _outside_the_transport() -> list[Path]:
    files = [*sorted(PACKAGE.rglob("*.py")), *sorted((REPOSITORY / "bench").rglob("*.py"))]
    return [
        path
        for path in files
        if PACKAGE / "transport" not in path.parents and path != MEASURES_OTHER_LIBRARIES
    ]


def transport_violations(path: Path, source: str) -> Iterator[str]:
    """What in `source` opens an exec websocket or finds credentials on its own."""
    tree = ast.parse(source)
    # Prose may name the places (docstrings say where credentials come from); code may not.
    prose = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    for module in imported_modules(source, "openblox"):
        if within(module, ("websocket", "kubernetes.config", "kubernetes.stream")):
            yield f"imports {module}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in KUBERNETES_LOADERS:
            yield f"calls {node.attr}"
        elif isinstance(node, ast.Name) and node.id in KUBERNETES_LOADERS:
            yield f"calls {node.id}"
        elif (
            isinstance(node, ast.Constant)
            and id(node) not in prose
            and isinstance(node.value, str)
            and (node.value == ".kube" or any(place in node.value for place in CREDENTIAL_PLACES))
        ):
            yield f"names {node.value!r}"


def test_only_the_transport_opens_exec_websockets_or_finds_credentials() -> None:
    """One exec websocket and one credential loader (issue 13): nothing outside
    `openblox/transport/` in the package or the benchmarks imports `websocket`, calls a
    `kubernetes.config` loader, or names a kubeconfig's or a ServiceAccount's place."""
    violations = [
        f"{path.relative_to(REPOSITORY)} {what}"
        for path in _outside_the_transport()
        for what in transport_violations(path, path.read_text())
    ]
    assert violations == []


@pytest.mark.parametrize(
    "source",
    [
        "import websocket\n",
        "from kubernetes import config\nconfig.load_kube_config()\n",
        "from kubernetes.config import load_incluster_config\n",
        "p = Path.home() / '.kube' / 'config'\n",
        "token = open('/var/run/secrets/kubernetes.io/serviceaccount/token').read()\n",
    ],
)
def test_the_transport_check_catches_each_way_round_it(source: str) -> None:
    assert list(transport_violations(PACKAGE / "cli" / "main.py", source))


# The `kubernetes` package, and urllib3, which only it brings into the bench extra.
KUBERNETES_PACKAGE = ("kubernetes", "kubernetes_asyncio", "urllib3")


def bench_kubernetes_imports(path: Path, source: str) -> list[str]:
    """The `kubernetes` package's modules `source`, the bench module at `path`, imports."""
    package = ".".join(path.relative_to(REPOSITORY).parts[:-1])
    return [
        module for module in imported_modules(source, package) if within(module, KUBERNETES_PACKAGE)
    ]


def test_only_the_client_library_benchmark_imports_the_kubernetes_package() -> None:
    """The benchmarks' harness goes through `openblox.transport` like everything else (ADR
    0018); the `bench` extra installs `kubernetes` only for the client-library comparison,
    which measures it against lightkube, kr8s and the transport."""
    violations = [
        f"{path.relative_to(REPOSITORY)} imports {module}"
        for path in sorted((REPOSITORY / "bench").rglob("*.py"))
        if path != MEASURES_OTHER_LIBRARIES
        for module in bench_kubernetes_imports(path, path.read_text())
    ]
    assert violations == []


@pytest.mark.parametrize(
    "source",
    [
        "import kubernetes\n",
        "from kubernetes.client.exceptions import ApiException\n",
        "def f():\n    from kubernetes import client\n",
        "import urllib3\n",
    ],
)
def test_the_bench_check_catches_each_import_of_the_kubernetes_package(source: str) -> None:
    assert bench_kubernetes_imports(REPOSITORY / "bench" / "cluster_side.py", source)


# ------------------------------------------------------------------ no import cycles


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph() -> dict[str, set[str]]:
    """Module -> the openblox modules it imports (`from pkg import mod` counts as pkg.mod).

    Every import counts, those inside functions and under `if TYPE_CHECKING:` too: a
    cycle hidden from the interpreter is still two modules that cannot be read apart."""
    modules = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            for target in imported_modules(ast.unparse(node), package):
                if isinstance(node, ast.ImportFrom):
                    submodules = {f"{target}.{alias.name}" for alias in node.names}
                    found = submodules & modules.keys()
                    if found:
                        edges |= found
                        continue
                if target in modules:
                    edges.add(target)
        graph[name] = edges - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for successor in sorted(graph.get(node, ())):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_openblox_has_no_import_cycles() -> None:
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


# The layer order, lowest first, as ARCHITECTURE.md states it in one line: a package (or
# top-level module) imports only from those before it. Register a new package here.
LAYER_ORDER = (
    "guest",
    "names",
    "timestamps",
    "models",
    "lifetime",
    "denials",
    "builders",
    "pool",
    "leadership",
    "transport",
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


# ------------------------------------------------------------------ the controller's wiring

CONTROLLER = PACKAGE / "controller"
# `Runtime.build` makes every part of the operator and hands each what it needs; no part
# builds another's collaborators or reaches through one (issue 35).
WIRING = "openblox.controller.runtime"
RECONCILE = "openblox.controller.reconcile"


def test_only_the_wiring_imports_the_reconcile() -> None:
    """The pool keeper and the reaper get the parts they share with the reconcile (the pod
    boundaries, the namespaces, the deadlines, a `reconcile` callable) from `Runtime.build`,
    not by importing the reconciler and reaching through it."""
    importers = sorted(
        _module_name(path)
        for path in PACKAGE.rglob("*.py")
        if _module_name(path) not in (WIRING, RECONCILE)
        and any(within(module, (RECONCILE,)) for module in file_imports(path))
    )
    assert importers == []


def test_only_the_wiring_and_the_handlers_import_the_wiring() -> None:
    importers = sorted(
        _module_name(path)
        for path in PACKAGE.rglob("*.py")
        if _module_name(path) != WIRING
        and any(within(module, (WIRING,)) for module in file_imports(path))
    )
    assert importers == ["openblox.controller.handlers"]


def _set_after_construction(source: str) -> list[str]:
    """`part.attribute = …` on anything but `self`, and `setattr(…)`: a collaborator
    patched in after it was made. A literal is a setting, not a collaborator (kopf's
    `settings.posting.enabled = False`), and passes."""
    found = []
    for node in ast.walk(ast.parse(source)):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign) and not isinstance(node.value, ast.Constant):
            targets = list(node.targets)
        elif isinstance(node, ast.AnnAssign) and not isinstance(node.value, ast.Constant | None):
            targets = [node.target]
        for target in targets:
            if isinstance(target, ast.Attribute) and not (
                isinstance(target.value, ast.Name) and target.value.id in ("self", "cls")
            ):
                found.append(ast.unparse(target))
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "setattr"
        ):
            found.append(ast.unparse(node))
    return found


def test_the_controller_wires_its_parts_through_constructors_only() -> None:
    violations = [
        f"{path.relative_to(PACKAGE.parent)} sets {what}"
        for path in sorted(CONTROLLER.glob("*.py"))
        for what in _set_after_construction(path.read_text())
    ]
    assert violations == []


def test_the_wiring_check_catches_a_part_patched_after_it_was_made() -> None:
    source = (
        "keeper = Keeper()\npools.on_change = keeper.nudge\nsetattr(pods, 'claimer', c)\n"
        "settings.posting.enabled = False\n"
    )
    assert _set_after_construction(source) == [
        "pools.on_change",
        "setattr(pods, 'claimer', c)",
    ]
    assert _set_after_construction("self._claimer = claimer\n") == []
