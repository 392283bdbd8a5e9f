"""`openblox mcp` without a cluster: the result shaping, the path rules, and the tool schemas
as the SDK's own client sees them (in-process). Bad input must be refused before the
session ever connects to a cluster."""

from __future__ import annotations

import argparse
import base64
import json
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest
from mcp import Client as McpClient
from mcp.types import CallToolResult

from openblox.agent_tools.schemas import RunResult
from openblox.agent_tools.server import build_server
from openblox.agent_tools.session import SandboxSession, SessionConfig
from openblox.agent_tools.shaping import (
    DENIAL_ADVICE,
    decode_upload,
    error_text,
    file_content,
    process_info,
    process_logs,
    run_result,
    sandbox_path,
    writable_path,
)
from openblox.agent_tools.stdio import config_from
from openblox.cli.main import parser
from openblox.client.processes import Process
from openblox.denials import CATEGORIES, Denial

NETWORK_DENIAL = {
    "schema": "openblox.sh/denial/v1",
    "denied": "network",
    "attempted": "10.96.0.1:443",
    "because": "egress=none",
    "profile": "code-exec",
    "at": "2026-12-01T10:00:00Z",
    "evidence": "OSError: [Errno 101] Network is unreachable",
    "inferred": False,
}
NETWORK = Denial.from_dict(NETWORK_DENIAL)


@dataclass(frozen=True)
class Outcome:
    stdout: bytes = b""
    stderr: bytes = b""
    exit_code: int = 0
    timed_out: bool = False
    truncated: bool = False
    duration: float = 0.123456
    denials: tuple[Denial, ...] = field(default=())


# ---------------------------------------------------------------------------- shaping


def test_a_clean_run_has_its_output_as_text_and_no_notes() -> None:
    result = run_result(Outcome(stdout=b"42\n"), sandbox="mcp-1", timeout=60, cap=1024)
    assert (result.stdout, result.exit_code, result.notes, result.denials) == ("42\n", 0, [], [])
    assert result.duration_seconds == 0.1235
    assert result.sandbox == "mcp-1"


def test_a_denial_is_structured_and_its_note_says_what_to_do_instead() -> None:
    result = run_result(
        Outcome(exit_code=1, stderr=b"OSError", denials=(NETWORK,)),
        sandbox="mcp-1",
        timeout=60,
        cap=1024,
    )
    dumped = result.model_dump(mode="json", by_alias=True)
    assert dumped["denials"] == [NETWORK_DENIAL]  # every field kept, `schema` included
    (note,) = result.notes
    assert note.startswith("denied network 10.96.0.1:443 (egress=none): ")
    assert "127.0.0.1" in note and "do not retry" in note


def test_timeout_and_cut_output_are_said_in_words() -> None:
    result = run_result(
        Outcome(timed_out=True, truncated=True, exit_code=137), sandbox="s", timeout=2.5, cap=99
    )
    assert result.timed_out and result.truncated
    assert any("timed out after 2.5s" in note for note in result.notes)
    assert any("cut at the profile's cap of 99 bytes" in note for note in result.notes)


def test_output_that_is_not_utf8_is_shown_not_lost_as_an_exception() -> None:
    result = run_result(Outcome(stdout=b"\xff\xfeok"), sandbox="s", timeout=1, cap=1)
    assert result.stdout == "\ufffd\ufffdok"


def test_every_denial_category_has_advice() -> None:
    assert set(DENIAL_ADVICE) == set(CATEGORIES)


@pytest.mark.parametrize(
    ("path", "resolved"),
    [
        ("notes.txt", "/workspace/notes.txt"),
        ("/workspace/a/b.py", "/workspace/a/b.py"),
        ("/tmp/x", "/tmp/x"),
        ("sub/../x", "/workspace/x"),
    ],
)
def test_writable_paths_are_normalised(path: str, resolved: str) -> None:
    assert writable_path(path) == resolved


@pytest.mark.parametrize(
    "path", ["/etc/passwd", "/workspace/../etc/x", "../x", "/tmpfoo/x", "/workspace", "/"]
)
def test_paths_outside_the_writable_places_are_refused_with_the_places_named(path: str) -> None:
    with pytest.raises(ValueError, match=r"outside the writable places: write under /workspace"):
        writable_path(path)


def test_a_nul_byte_in_a_path_is_refused() -> None:
    with pytest.raises(ValueError, match="NUL"):
        sandbox_path("/workspace/a\0b")


def test_reads_may_name_any_absolute_path() -> None:
    assert sandbox_path("/etc/os-release") == "/etc/os-release"


def test_uploads_decode_text_and_base64_and_refuse_bad_base64() -> None:
    assert decode_upload("héllo", "utf-8") == "héllo".encode()
    assert decode_upload(base64.b64encode(b"\x00\xff").decode(), "base64") == b"\x00\xff"
    with pytest.raises(ValueError, match="not valid base64"):
        decode_upload("@@not base64@@", "base64")


def test_file_content_is_text_when_it_can_be_and_base64_otherwise() -> None:
    text = file_content("/workspace/a", "naïve\n".encode())
    assert (text.encoding, text.content, text.size) == ("utf-8", "naïve\n", 7)
    binary = file_content("/workspace/b", b"\x89PNG\xff")
    assert binary.encoding == "base64"
    assert base64.b64decode(binary.content) == b"\x89PNG\xff"


def test_process_info_reads_the_clients_record() -> None:
    record = {
        "name": "web",
        "argv": ["python3", "-m", "http.server"],
        "running": True,
        "pid": 7,
        "startedAt": "2026-12-01T10:00:00Z",
        "started": True,
    }
    process = Process.from_record(record)
    info = process_info(process.to_dict(), process.started)
    assert (info.name, info.argv, info.running, info.pid, info.started) == (
        "web",
        ["python3", "-m", "http.server"],
        True,
        7,
        True,
    )
    assert info.exit_code is None and info.started_at == "2026-12-01T10:00:00Z"


def test_logs_say_when_only_the_newest_part_is_shown_or_nothing_came_yet() -> None:
    assert process_logs("web", "stdout", b"abcd", 4).notes == [
        "only the last 4 bytes are shown; older output may exist"
    ]
    assert process_logs("web", "stderr", b"", 4).notes == ["nothing on stderr yet"]
    assert process_logs("web", "stdout", b"ab", 4).notes == []


def test_an_error_with_a_record_carries_the_record_and_its_advice() -> None:
    text = error_text("sandbox refused", NETWORK)
    lines = text.splitlines()
    assert lines[0] == "sandbox refused"
    assert lines[1].startswith("denied network")
    assert json.loads(lines[2].removeprefix("denial: ")) == NETWORK_DENIAL
    assert error_text("plain") == "plain"


# ---------------------------------------------------------------------------- the tools

EXPECTED_TOOLS = {
    "run_python",
    "run_command",
    "write_file",
    "read_file",
    "list_files",
    "start_process",
    "list_processes",
    "stop_process",
    "read_process_logs",
    "preview_link",
    "list_profiles",
    "reset_sandbox",
    "delete_sandbox",
}


def _session() -> SandboxSession:
    return SandboxSession(SessionConfig(profile="code-exec", namespace="nowhere"))


def _with_client(session: SandboxSession, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    async def main() -> list[Any]:
        async with McpClient(build_server(session)) as client:
            out: list[Any] = [await client.list_tools()]
            for name, arguments in calls:
                out.append(await client.call_tool(name, arguments))
            return out

    return anyio.run(main)


def test_the_tools_are_listed_with_descriptions_and_schemas() -> None:
    (listing,) = _with_client(_session(), [])
    tools = {tool.name: tool for tool in listing.tools}
    assert set(tools) == EXPECTED_TOOLS
    for tool in tools.values():
        assert tool.description and len(tool.description) > 40, tool.name
        assert tool.input_schema["type"] == "object"
        assert tool.output_schema is not None, tool.name
    run = tools["run_python"]
    assert run.input_schema["required"] == ["code"]
    assert run.output_schema == RunResult.model_json_schema()


def test_no_tool_lets_the_model_name_a_namespace_profile_image_runtime_or_limit() -> None:
    (listing,) = _with_client(_session(), [])
    forbidden = {"namespace", "profile", "image", "runtime", "runtimeclass", "memory", "cpu"}
    for tool in listing.tools:
        names = {name.lower() for name in tool.input_schema.get("properties", {})}
        assert not names & forbidden, tool.name
        assert "output_limit" not in names and "processes" not in names


BAD_CALLS = [
    ("run_command", {"argv": "ls -la"}, "argv", "valid list"),
    ("run_command", {"argv": []}, "argv", "at least 1 item"),
    ("run_python", {"code": "1", "timeout_seconds": -1}, "timeout_seconds", "greater than 0"),
    ("run_python", {"code": "print(1)", "timeout_seconds": "soon"}, "timeout_seconds", "number"),
    ("run_python", {}, "code", "Field required"),
    ("write_file", {"path": "/etc/passwd", "content": "x"}, "/etc/passwd", "writable places"),
    ("write_file", {"path": "a", "content": "%%", "encoding": "base64"}, "base64", "base64"),
    ("write_file", {"path": "a", "content": "x", "encoding": "utf-16"}, "encoding", "utf-8"),
    ("start_process", {"name": "Bad Name", "argv": ["x"]}, "name", "pattern"),
    ("preview_link", {"port": 0}, "port", "greater than or equal to 1"),
    ("preview_link", {"port": "eighty"}, "port", "integer"),
    ("read_process_logs", {"name": "web", "max_bytes": -5}, "max_bytes", "greater than"),
]


@pytest.mark.parametrize(("tool", "arguments", "names", "says"), BAD_CALLS)
def test_bad_input_is_a_clear_tool_error_and_touches_no_cluster(
    tool: str, arguments: dict[str, Any], names: str, says: str
) -> None:
    session = _session()
    _, result = _with_client(session, [(tool, arguments)])
    assert isinstance(result, CallToolResult)
    assert result.is_error
    text = result.content[0].text  # type: ignore[union-attr]
    assert names in text and says in text, text
    assert session._client is None  # refused before any connection was made


def test_one_bad_call_does_not_end_the_session() -> None:
    session = _session()
    _, bad, again = _with_client(
        session, [("run_command", {"argv": 5}), ("write_file", {"path": "/", "content": ""})]
    )
    assert bad.is_error and again.is_error
    assert "writable places" in again.content[0].text


# ---------------------------------------------------------------------------- command line


def _mcp_args(*extra: str) -> argparse.Namespace:
    return parser().parse_args(["-n", "team-a", "mcp", "--profile", "code-exec", *extra])


def test_the_command_line_sets_what_the_model_cannot() -> None:
    config = config_from(_mcp_args("--idle-timeout", "30", "--max-age", "600"))
    assert (config.profile, config.namespace, config.idle_timeout_seconds) == (
        "code-exec",
        "team-a",
        30,
    )
    assert config.max_age_seconds == 600


@pytest.mark.parametrize("flag", ["--idle-timeout", "--max-age"])
def test_a_lifetime_below_one_second_is_refused_at_start(flag: str) -> None:
    with pytest.raises(SystemExit, match=f"{flag} must be at least 1 second"):
        config_from(_mcp_args(flag, "0"))
