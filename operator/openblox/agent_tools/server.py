"""`openblox mcp`: the tools an agent uses, over the Model Context Protocol (stdio).

Each tool runs the client's blocking calls in a worker thread, so a long command never
stalls the protocol. Every failure a model can act on becomes a tool error with words
(and, for a policy, the denial record) instead of a crash or a hang.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio.to_thread
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

from openblox.agent_tools.schemas import (
    DEFAULT_LOG_BYTES,
    WRITABLE_PLACES,
    Argv,
    Code,
    Cwd,
    Encoding,
    FileContent,
    FilePath,
    FileWritten,
    Listing,
    LogBytes,
    LogStream,
    Port,
    PreviewLink,
    ProcessInfo,
    ProcessList,
    ProcessLogs,
    ProcessName,
    ProfileInfo,
    Profiles,
    RunResult,
    SandboxChange,
    Stdin,
    TimeoutSeconds,
    WritablePath,
)
from openblox.agent_tools.session import SandboxReaped, SandboxSession
from openblox.agent_tools.shaping import (
    decode_upload,
    error_text,
    file_content,
    process_info,
    process_logs,
    run_result,
    sandbox_path,
    writable_path,
)
from openblox.client import (
    AdmissionDenied,
    ExecTransportError,
    OpenbloxClientError,
    Sandbox,
    SandboxGone,
    SandboxNotReady,
    SandboxTimeout,
)
from openblox.names import COMMAND, WORKSPACE_DIR
from openblox.transport import ApiError

T = TypeVar("T")

INSTRUCTIONS = """\
Tools to run code in an isolated sandbox on a Kubernetes cluster. The session has one
sandbox, made on first use: Python 3 and a POSIX userland, no network beyond loopback,
only /workspace and /tmp writable, a per-command timeout and output cap (list_profiles
shows them). When a result lists `denials`, a policy stopped the command: read its
`notes` and change the approach instead of retrying the same thing."""

READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
CHANGES = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
DESTRUCTIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False)


def build_server(session: SandboxSession) -> MCPServer[None]:
    """The MCP server for one session; the session's sandbox is made on first use."""
    server: MCPServer[None] = MCPServer(COMMAND, instructions=INSTRUCTIONS)

    async def call(work: Callable[[], T]) -> T:
        try:
            return await anyio.to_thread.run_sync(lambda: _checked(session, work))
        except ToolError:
            raise
        except SandboxReaped as error:
            raise ToolError(error_text(str(error), error.record)) from error
        except AdmissionDenied as error:
            raise ToolError(
                error_text(f"the cluster refused to create the sandbox: {error}", error.record)
            ) from error
        except (SandboxNotReady, SandboxTimeout) as error:
            raise ToolError(
                f"the sandbox could not start: {error}. This is the cluster's or the server "
                "operator's to fix; calling again retries."
            ) from error
        except SandboxGone as error:
            raise ToolError(error_text(str(error), error.record)) from error
        except (OpenbloxClientError, ValueError) as error:
            raise ToolError(str(error)) from error
        except ApiError as error:
            raise ToolError(
                f"the Kubernetes API refused the request ({error.status} {error.reason}); "
                "the identity running this server may lack the openblox-client role"
            ) from error

    def tool(
        description: str, annotations: ToolAnnotations
    ) -> Callable[[Callable[..., Awaitable[T]]], Callable[..., Awaitable[T]]]:
        return server.tool(description=description, annotations=annotations)

    def run(
        sandbox: Sandbox, argv: list[str], stdin: str | None, cwd: str | None, timeout: float | None
    ) -> RunResult:
        result = sandbox.exec(argv, stdin=stdin, cwd=cwd or WORKSPACE_DIR, timeout=timeout)
        limits = sandbox.exec_limits
        return run_result(
            result,
            sandbox=sandbox.name,
            timeout=timeout or limits.timeout_seconds,
            cap=limits.output_bytes,
        )

    @tool(
        "Run Python 3 source in the sandbox (python3 -c SOURCE, in /workspace) and return its "
        "stdout, stderr, exit code, whether it timed out or was cut, and any policy denials "
        "with what to do instead. State persists between calls only through files.",
        CHANGES,
    )
    async def run_python(
        code: Code, timeout_seconds: TimeoutSeconds = None, stdin: Stdin = None
    ) -> RunResult:
        return await call(
            lambda: run(session.sandbox(), ["python3", "-c", code], stdin, None, timeout_seconds)
        )

    @tool(
        "Run a command (argv, no shell) in the sandbox and return its stdout, stderr, exit "
        "code, whether it timed out or was cut, and any policy denials with what to do "
        "instead. For a server or anything long-running, use start_process.",
        CHANGES,
    )
    async def run_command(
        argv: Argv, timeout_seconds: TimeoutSeconds = None, stdin: Stdin = None, cwd: Cwd = None
    ) -> RunResult:
        return await call(lambda: run(session.sandbox(), argv, stdin, cwd, timeout_seconds))

    @tool(
        "Write a whole file in the sandbox (under /workspace or /tmp), replacing it if it "
        "exists. Text as UTF-8, or bytes as base64.",
        CHANGES,
    )
    async def write_file(
        path: WritablePath, content: str, encoding: Encoding = "utf-8"
    ) -> FileWritten:
        def write() -> FileWritten:
            # Checked before the sandbox is touched: a refused path changes nothing.
            target, data = writable_path(path), decode_upload(content, encoding)
            session.sandbox().files.write(target, data)
            return FileWritten(path=target, bytes=len(data))

        return await call(write)

    @tool(
        "Read a whole file from the sandbox: UTF-8 text as it is, anything else as base64. "
        "Files larger than the profile's output cap are refused; read part of one with "
        "run_command (head, tail, sed).",
        READ_ONLY,
    )
    async def read_file(path: FilePath) -> FileContent:
        def read() -> FileContent:
            target = sandbox_path(path)
            sandbox = session.sandbox()
            limit = sandbox.exec_limits.output_bytes
            return file_content(target, sandbox.files.read(target, limit=limit))

        return await call(read)

    @tool("List a directory in the sandbox (default /workspace): names, types, sizes.", READ_ONLY)
    async def list_files(path: FilePath = WORKSPACE_DIR) -> Listing:
        def listing() -> Listing:
            target = sandbox_path(path)
            entries = session.sandbox().files.list(target)
            return Listing.model_validate({"path": target, "entries": entries})

        return await call(listing)

    @tool(
        "Start a named background command (argv, no shell), e.g. a server. It keeps running "
        "after this call returns; read its output with read_process_logs, end it with "
        "stop_process. Starting a name that is already running starts nothing.",
        CHANGES,
    )
    async def start_process(name: ProcessName, argv: Argv, cwd: Cwd = None) -> ProcessInfo:
        process = await call(
            lambda: session.sandbox().start_process(name, argv, cwd=cwd or WORKSPACE_DIR)
        )
        return process_info(process.to_dict(), process.started)

    @tool("List the session's background commands, running or ended.", READ_ONLY)
    async def list_processes() -> ProcessList:
        processes = await call(lambda: session.sandbox().processes())
        listed = [process_info(p.to_dict()) for p in processes]
        return ProcessList(processes=listed, omitted=processes.omitted)

    @tool(
        "Stop a background command and everything it started (TERM, then KILL after 2 s).",
        DESTRUCTIVE,
    )
    async def stop_process(name: ProcessName) -> ProcessInfo:
        process = await call(lambda: session.sandbox().stop_process(name))
        return process_info(process.to_dict())

    @tool("Read the newest output of a background command.", READ_ONLY)
    async def read_process_logs(
        name: ProcessName, stream: LogStream = "stdout", max_bytes: LogBytes = DEFAULT_LOG_BYTES
    ) -> ProcessLogs:
        data = await call(lambda: session.sandbox().logs(name, stream=stream, limit=max_bytes))
        return process_logs(name, stream, data, max_bytes)

    @tool(
        "Get a signed, expiring link that a person can open in a browser to reach a server "
        "listening on 127.0.0.1:PORT inside the sandbox (start it with start_process first).",
        READ_ONLY,
    )
    async def preview_link(port: Port) -> PreviewLink:
        ttl = session.config.preview_ttl_seconds
        url = await call(
            lambda: session.sandbox().preview_url(
                port, ttl=ttl, base_url=session.config.preview_base_url
            )
        )
        return PreviewLink(
            url=url,
            port=port,
            expires_in_seconds=ttl,
            notes=[
                f"the link reaches 127.0.0.1:{port} inside this sandbox only; it needs no "
                "other credential, so share it only with whom you mean to"
            ],
        )

    @tool(
        "Describe the profile this session's sandbox runs under: its timeout, output cap, "
        "process cap, writable places and network. The profile is chosen by whoever runs "
        "this server; it cannot be changed from here.",
        READ_ONLY,
    )
    async def list_profiles() -> Profiles:
        return Profiles(profiles=[await call(lambda: _profile_info(session))])

    @tool(
        "Delete the session's sandbox and make a fresh, empty one now: every file and "
        "background command is lost.",
        DESTRUCTIVE,
    )
    async def reset_sandbox() -> SandboxChange:
        def reset() -> SandboxChange:
            deleted = session.delete()
            fresh = session.sandbox()
            return SandboxChange(
                deleted=deleted, sandbox=fresh.name, notes=["the new sandbox is empty"]
            )

        return await call(reset)

    @tool(
        "Delete the session's sandbox: every file and background command is lost. The "
        "next tool call makes a fresh one.",
        DESTRUCTIVE,
    )
    async def delete_sandbox() -> SandboxChange:
        deleted = await call(session.delete)
        notes = ["deleted; the next call makes a fresh sandbox"] if deleted else []
        return SandboxChange(deleted=deleted, sandbox=None, notes=notes or ["there was none"])

    return server


def _checked(session: SandboxSession, work: Callable[[], T]) -> T:
    """Run `work`; if it failed because the sandbox went away, say that instead."""
    try:
        return work()
    except (SandboxGone, ExecTransportError) as error:
        session.check_alive(error)
        raise


def _profile_info(session: SandboxSession) -> ProfileInfo:
    sandbox = session.sandbox()
    limits = sandbox.exec_limits
    return ProfileInfo(
        name=sandbox.profile,
        namespace=sandbox.namespace,
        sandbox=sandbox.name,
        timeout_seconds=limits.timeout_seconds,
        output_bytes=limits.output_bytes,
        processes=limits.processes,
        writable=list(WRITABLE_PLACES),
        network="none: loopback (127.0.0.1) only",
        expires_at=sandbox.status.get("expiresAt"),
    )
