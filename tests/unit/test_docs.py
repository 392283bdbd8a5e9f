"""The documents cannot drift from the repository: links resolve, `make` targets exist,
and every shell block in a tested document says whether the cluster docs test runs it.

The convention (read by tests/cluster/test_docs_commands.py, which runs the blocks):

    <!-- test: run -->            the next fenced block is run on the cluster; it must exit 0
    <!-- test: output -->         run, and its stdout must equal the output the block shows
                                  (```console blocks: lines after the `$ ` commands)
    <!-- test: skip: <reason> --> not run; the reason says why (it is shown to the reader too)

The marker is the last non-blank line before the opening fence. Runnable blocks are
```sh, ```bash, ```shell, ```console and ```python. A document that uses the convention
at all must mark every shell block in it, so nothing a reader might paste goes untested
by accident. The blocks of one document run in order in one bash process, like a reader
following it in one terminal.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SKIP_DIRS = {
    ".git",
    ".venv",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    "node_modules",
    "conformance-results",
}
SHELL_LANGUAGES = {"sh", "bash", "shell", "console"}
RUNNABLE_LANGUAGES = SHELL_LANGUAGES | {"python", "py"}
MARKER = re.compile(r"^<!--\s*test:\s*(?P<body>.*?)\s*-->$")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")
HEREDOC = re.compile(r"<<-?\s*(['\"]?)(?P<word>[A-Za-z_][A-Za-z0-9_]*)\1")
# [text](target) and ![alt](target); reference-style definitions too.
INLINE_LINK = re.compile(
    r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\((?P<target><[^>]*>|[^)\s]+)(?:\s+\"[^\"]*\")?\)"
)
REFERENCE_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s+(?P<target>\S+)", re.MULTILINE)
MAKE_MENTION = re.compile(r"(?<![\w./-])make\s+(?P<target>[a-z][a-z0-9_-]*)(?![\w/.-])")


@dataclass(frozen=True)
class Block:
    """One fenced code block of a Markdown document."""

    path: Path
    line: int
    """1-based line of the opening fence."""
    language: str
    text: str
    marker: str | None
    """The body of the `<!-- test: ... -->` marker before it, or None."""

    @property
    def where(self) -> str:
        return f"{_display(self.path)}:{self.line}"

    @property
    def action(self) -> str | None:
        """run, output, skip, or None when unmarked; ValueError for a malformed marker."""
        if self.marker is None:
            return None
        if self.marker in ("run", "output"):
            return self.marker
        if self.marker.startswith("skip:") and self.marker[5:].strip():
            return "skip"
        raise ValueError(
            f'{self.where}: marker "<!-- test: {self.marker} -->" is not one of '
            '"run", "output" or "skip: <reason>"'
        )

    @property
    def runs(self) -> bool:
        return self.action in ("run", "output")


@dataclass
class ConsoleBlock:
    """A ```console block split into the commands and the output it shows."""

    commands: list[str] = field(default_factory=list)
    output: list[str] = field(default_factory=list)


def _display(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def markdown_files() -> list[Path]:
    found = []
    for path in sorted(REPO.rglob("*.md")):
        relative = path.relative_to(REPO)
        if any(part in SKIP_DIRS or part.endswith(".egg-info") for part in relative.parts):
            continue
        found.append(path)
    return found


def blocks(path: Path) -> Iterator[Block]:
    lines = path.read_text().splitlines()
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        fence, indent = opening["fence"], len(opening["indent"])
        language = (opening["info"].split() or [""])[0].lower()
        marker = None
        previous = index - 1
        while previous >= 0 and not lines[previous].strip():
            previous -= 1
        if previous >= 0 and (found := MARKER.match(lines[previous].strip())):
            marker = found["body"]
        body = []
        end = index + 1
        while end < len(lines):
            closing = FENCE.match(lines[end])
            if (
                closing
                and closing["fence"][0] == fence[0]
                and len(closing["fence"]) >= len(fence)
                and not closing["info"].strip()
            ):
                break
            body.append(lines[end][indent:] if lines[end][:indent].isspace() else lines[end])
            end += 1
        yield Block(path, index + 1, language, "\n".join(body) + "\n", marker)
        index = end + 1


def parse_console(text: str) -> ConsoleBlock:
    """Commands start with `$ `; a trailing backslash or a heredoc carries them on."""
    parsed = ConsoleBlock()
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        if not line.startswith("$ "):
            parsed.output.append(line)
            index += 1
            continue
        command = [line[2:]]
        while command[-1].endswith("\\") and index + 1 < len(lines):
            index += 1
            command.append(lines[index])
        for heredoc in HEREDOC.finditer(" ".join(command)):
            while index + 1 < len(lines):
                index += 1
                command.append(lines[index])
                if lines[index].strip() == heredoc["word"]:
                    break
        parsed.commands.append("\n".join(command))
        index += 1
    return parsed


def script_of(block: Block) -> str:
    """The shell text that runs a block (python blocks run through $OPENBLOX_DOCS_PYTHON)."""
    if block.language == "console":
        return "\n".join(parse_console(block.text).commands) + "\n"
    if block.language in ("python", "py"):
        return (
            "\"$OPENBLOX_DOCS_PYTHON\" - <<'__OPENBLOX_DOCS_PYTHON__'\n"
            f"{block.text}__OPENBLOX_DOCS_PYTHON__\n"
        )
    return block.text


def expected_output(block: Block) -> str:
    if block.language != "console":
        raise ValueError(f"{block.where}: only ```console blocks can be checked for output")
    lines = parse_console(block.text).output
    return "\n".join(line.rstrip() for line in lines).strip("\n")


# Documents whose blocks run against the three-node kind cluster (tests/kind) instead of
# the embedded one.
KIND_DOCUMENTS = (REPO / "docs" / "kind.md",)


def documents_with_runnable_blocks() -> list[Path]:
    return [
        path
        for path in markdown_files()
        if path not in KIND_DOCUMENTS and any(b.runs for b in blocks(path))
    ]


def uses_the_convention(path: Path) -> bool:
    return any(block.marker is not None for block in blocks(path))


# ---------------------------------------------------------------------------- links


def github_anchor(heading: str) -> str:
    """The id GitHub gives a heading: lowercase, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`([^`]*)`", r"\1", heading.strip())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = text.lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    counts: dict[str, int] = {}
    in_fence = False
    for line in path.read_text().splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            anchor = github_anchor(heading[1])
            seen = counts.get(anchor, 0)
            counts[anchor] = seen + 1
            found.add(anchor if seen == 0 else f"{anchor}-{seen}")
        for explicit in re.finditer(r'<a\s+(?:name|id)="([^"]+)"', line):
            found.add(explicit[1])
    return found


def prose(path: Path) -> str:
    """The document without its fenced blocks (links in code are not links)."""
    kept, in_fence = [], False
    for line in path.read_text().splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if not in_fence:
            kept.append(re.sub(r"`[^`]*`", "", line))
    return "\n".join(kept)


def relative_links(path: Path) -> Iterator[str]:
    text = prose(path)
    targets = [m["target"] for m in INLINE_LINK.finditer(text)]
    targets += [m["target"] for m in REFERENCE_LINK.finditer(text)]
    for written in targets:
        target = written.strip("<>")
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("//"):
            continue  # http:, https:, mailto: ...
        yield target


def broken_link(path: Path, target: str) -> str | None:
    file_part, _, anchor = target.partition("#")
    destination = (path.parent / file_part).resolve() if file_part else path
    if file_part and not destination.exists():
        return f"{target}: {_display(destination)} does not exist"
    if anchor and destination.suffix == ".md" and anchor not in anchors(destination):
        return f"{target}: no heading with anchor #{anchor} in {_display(destination)}"
    return None


# ---------------------------------------------------------------------------- make


def makefile_targets() -> set[str]:
    text = (REPO / "Makefile").read_text()
    targets = set(re.findall(r"^([A-Za-z0-9_][A-Za-z0-9_.-]*)\s*:(?!=)", text, re.MULTILINE))
    for phony in re.findall(r"^\.PHONY\s*:(.*)$", text, re.MULTILINE):
        targets.update(phony.split())
    return targets


def code_text(path: Path) -> str:
    """Inline code spans and fenced blocks: where a command is written (prose says "make
    sure" and means no target)."""
    pieces, in_fence = [], False
    for line in path.read_text().splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence:
            pieces.append(line)
        else:
            pieces.extend(re.findall(r"`([^`]+)`", line))
    return "\n".join(pieces)


def make_mentions(path: Path) -> set[str]:
    return {m["target"] for m in MAKE_MENTION.finditer(code_text(path))}


# ---------------------------------------------------------------------------- tests

DOCS = markdown_files()


def _id(path: Path) -> str:
    return str(path.relative_to(REPO))


def test_the_documents_this_project_promises_exist() -> None:
    required = [
        "README.md",
        "SECURITY.md",
        "THREAT_MODEL.md",
        "ARCHITECTURE.md",
        "docs/runtimes.md",
        "docs/limits.md",
        "docs/k3s.md",
        "docs/kind.md",
        "docs/production.md",
        "docs/adr/0001-no-multi-backend-abstraction.md",
        "docs/adr/0002-level-based-reconcile-on-raw-events.md",
        "docs/adr/0003-one-reaper-loop-with-a-lease.md",
        "docs/adr/0004-containerd-1.7-and-patched-gvisor-shim.md",
        "docs/adr/0005-kubernetes-client-library.md",
        "docs/adr/0009-one-election-on-a-lease.md",
    ]
    missing = [name for name in required if not (REPO / name).is_file()]
    assert not missing, f"missing documents: {missing}"


def test_no_two_adrs_share_a_number() -> None:
    numbers: dict[str, list[str]] = {}
    for adr in sorted((REPO / "docs" / "adr").glob("[0-9][0-9][0-9][0-9]-*.md")):
        numbers.setdefault(adr.name[:4], []).append(adr.name)
    shared = {n: names for n, names in numbers.items() if len(names) > 1}
    assert not shared, f"ADRs sharing a number: {shared}"


@pytest.mark.parametrize("path", DOCS, ids=_id)
def test_relative_links_resolve(path: Path) -> None:
    problems = [p for t in relative_links(path) if (p := broken_link(path, t))]
    assert not problems, f"{_id(path)}: broken links:\n" + "\n".join(problems)


@pytest.mark.parametrize("path", DOCS, ids=_id)
def test_make_targets_mentioned_exist(path: Path) -> None:
    unknown = sorted(make_mentions(path) - makefile_targets())
    assert not unknown, f"{_id(path)} mentions make targets the Makefile lacks: {unknown}"


@pytest.mark.parametrize("path", DOCS, ids=_id)
def test_markers_are_well_formed(path: Path) -> None:
    for block in blocks(path):
        action = block.action  # raises on a malformed marker
        if action and block.language not in RUNNABLE_LANGUAGES:
            raise AssertionError(
                f"{block.where}: ```{block.language} blocks cannot be run; drop the marker"
            )
        if action == "output":
            assert block.language == "console", (
                f"{block.where}: output checks need a ```console block"
            )
            assert expected_output(block), f"{block.where}: shows no output to check"


@pytest.mark.parametrize("path", [p for p in DOCS if uses_the_convention(p)], ids=_id)
def test_every_shell_block_says_whether_it_runs(path: Path) -> None:
    unmarked = [
        block.where
        for block in blocks(path)
        if block.language in SHELL_LANGUAGES and block.marker is None
    ]
    assert not unmarked, (
        "shell blocks without <!-- test: run|output|skip: reason --> in a document that "
        f"uses the convention: {unmarked}"
    )


def test_console_blocks_hold_commands() -> None:
    for path in DOCS:
        for block in blocks(path):
            if block.language == "console" and block.runs:
                assert parse_console(block.text).commands, f"{block.where}: no `$ ` command"


def test_the_readme_gives_exactly_the_two_setup_commands() -> None:
    readme = (REPO / "README.md").read_text()
    assert "make up" in readme and "make test" in readme
    assert {"up", "test"} <= makefile_targets()


# Self-checks of the parsers on small inputs, so a parser bug cannot pass silently.


def test_console_parsing_handles_continuations_and_heredocs() -> None:
    parsed = parse_console("$ echo a \\\n  b\na b\n$ cat <<'EOF'\nx\nEOF\nx\n$ true\n")
    assert parsed.commands == ["echo a \\\n  b", "cat <<'EOF'\nx\nEOF", "true"]
    assert parsed.output == ["a b", "x"]


def test_block_extraction_reads_markers_and_indented_fences(tmp_path: Path) -> None:
    document = tmp_path / "doc.md"
    document.write_text(
        "# T\n\n<!-- test: run -->\n```sh\necho hi\n```\n\n"
        "1. step\n\n   <!-- test: skip: needs a kind cluster -->\n   ```console\n"
        "   $ kind create cluster\n   ```\n\n```yaml\na: 1\n```\n"
    )
    found = list(blocks(document))
    assert [(b.language, b.action) for b in found] == [
        ("sh", "run"),
        ("console", "skip"),
        ("yaml", None),
    ]
    assert found[1].text == "$ kind create cluster\n"


def test_link_and_anchor_checks_catch_what_they_should() -> None:
    assert github_anchor("Why not just a pod with `runtimeClassName: gvisor`?") == (
        "why-not-just-a-pod-with-runtimeclassname-gvisor"
    )
    readme = REPO / "README.md"
    assert broken_link(readme, "docs/no-such-file.md")
    assert broken_link(readme, "#no-such-heading-anywhere")
    assert broken_link(readme, "Makefile") is None


def test_make_mentions_are_read_from_code_only(tmp_path: Path) -> None:
    document = tmp_path / "doc.md"
    document.write_text("Make sure to run `make up`, then:\n\n```sh\nmake test\n```\n")
    assert make_mentions(document) == {"up", "test"}


# Figures the documents copy from manifests: checked here so an edit to one shows up in
# the other.


def _runtime_classes() -> dict[str, Any]:
    found = {}
    for path in sorted((REPO / "runtimeclasses").glob("*.yaml")):
        document = yaml.safe_load(path.read_text())
        if document.get("kind") == "RuntimeClass":
            found[document["metadata"]["name"]] = document
    return found


def test_documented_runtime_class_overheads_match_the_manifests() -> None:
    runtimes = (REPO / "docs" / "runtimes.md").read_text()
    architecture = (REPO / "ARCHITECTURE.md").read_text()
    production = (REPO / "docs" / "production.md").read_text()
    for name, runtime_class in _runtime_classes().items():
        overhead = runtime_class["overhead"]["podFixed"]
        memory, cpu = overhead["memory"], overhead["cpu"]
        row = f"| `{name}` | `{runtime_class['handler']}` | {memory} memory, {cpu} CPU"
        assert row in runtimes, f"docs/runtimes.md lacks the row starting {row!r}"
        assert f"{memory} memory and {cpu} CPU" in architecture, (name, memory, cpu)
        label = {"gvisor": "gVisor", "kata": "Kata"}[name]
        assert f"{label}: {cpu}, {memory}" in production, (name, memory, cpu)


def test_documented_shipped_profiles_match_the_manifests() -> None:
    profiles = yaml.safe_load((REPO / "manifests" / "profiles.yaml").read_text())["data"]
    production = (REPO / "docs" / "production.md").read_text()
    for name, text in profiles.items():
        resources = yaml.safe_load(text)["resources"]
        request = resources.get("cpuRequest", resources["cpu"])
        row = f"| shipped `{name}` | {resources['cpu']} | {request} | {resources['memory']} |"
        assert row in production, f"docs/production.md lacks the row starting {row!r}"
