"""MCP: latency of the `run_python` tool call of `print(1)` over stdio, against a direct
`sandbox.exec` of the same command into the same sandbox.

`openblox mcp` is spawned by the MCP SDK's own client, as an agent would spawn it. Each
iteration makes one tool call and one direct exec, alternating which goes first, so
drift on the shared node lands on both alike. The floor is a tool call the server
refuses at schema validation: the protocol's round trip with no exec behind it.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client as McpClient
from mcp import StdioServerParameters

from bench import env
from bench.cluster_side import delete_namespace, make_namespace
from bench.results import Section
from openblox.client import Client

TITLES = {"mcp": "MCP: run_python of print(1) over stdio vs a direct sandbox.exec"}
ARGV = ["python3", "-c", "print(1)"]
# The target: the tool call within 1.2x of the direct exec, plus a few ms.
TARGET_RATIO, TARGET_SLACK_MS = 1.2, 5.0


def run(ctx: Any, section: Section) -> None:
    calls = ctx.n(200, 10)
    namespace = make_namespace(ctx.kube, f"obx-bench-mcp-{ctx.run_id}", sandboxes=True)
    ctx.cleanup(delete_namespace, ctx.kube, namespace)
    openblox = str(Path(sys.executable).parent / "openblox")
    server = StdioServerParameters(
        command=openblox, args=["--kubeconfig", env.KUBECONFIG, "-n", namespace, "mcp"]
    )
    client = Client(namespace, kubeconfig=env.KUBECONFIG)
    tool_ms: list[float] = []
    exec_ms: list[float] = []
    floor_ms: list[float] = []
    first_call: dict[str, float] = {}

    async def measure() -> None:
        async with McpClient(server) as mcp:
            started = time.monotonic()
            first = await mcp.call_tool("run_python", {"code": "print(1)"})
            first_call["ms"] = (time.monotonic() - started) * 1000
            if first.is_error or not first.structured_content:
                raise RuntimeError(f"the first tool call failed: {first.content}")
            name = first.structured_content["sandbox"]
            sandbox = await anyio.to_thread.run_sync(client.get, name)
            await anyio.to_thread.run_sync(sandbox.exec, ARGV)  # warm the direct path too

            async def tool_call() -> None:
                started = time.monotonic()
                result = await mcp.call_tool("run_python", {"code": "print(1)"})
                elapsed = (time.monotonic() - started) * 1000
                content = result.structured_content or {}
                if result.is_error or content.get("stdout") != "1\n":
                    raise RuntimeError(f"run_python did not print 1: {result.content}")
                tool_ms.append(elapsed)

            def direct() -> None:
                started = time.monotonic()
                result = sandbox.exec(ARGV)
                elapsed = (time.monotonic() - started) * 1000
                if result.stdout != b"1\n":
                    raise RuntimeError(f"exec did not print 1: {result.stdout[:80]!r}")
                exec_ms.append(elapsed)

            for index in range(calls):
                if index % 2:
                    await tool_call()
                    await anyio.to_thread.run_sync(direct)
                else:
                    await anyio.to_thread.run_sync(direct)
                    await tool_call()
                started = time.monotonic()
                refused = await mcp.call_tool(
                    "run_python", {"code": "print(1)", "timeout_seconds": -1}
                )
                floor_ms.append((time.monotonic() - started) * 1000)
                if not refused.is_error:
                    raise RuntimeError("a negative timeout was not refused")
                if index % 50 == 49:
                    ctx.log(f"mcp: {index + 1}/{calls}")

    anyio.run(measure)
    section.figure(
        "mcp.run.stdio",
        "run_python print(1): MCP tool call over stdio",
        "ms",
        tool_ms,
        baseline="mcp.run.exec",
        floor="mcp.roundtrip",
        headline=True,
    )
    section.figure(
        "mcp.run.exec", "python3 -c 'print(1)': a direct sandbox.exec, same sandbox", "ms", exec_ms
    )
    section.figure(
        "mcp.roundtrip",
        "a tool call refused at schema validation (the protocol's round trip, no exec)",
        "ms",
        floor_ms,
    )
    section.figure(
        "mcp.first_call",
        "the session's first run_python, which creates its sandbox",
        "ms",
        value=first_call["ms"],
    )
    tool = section.figures[0].center or 0.0
    direct = section.figures[1].center or 0.0
    verdict = "meets" if tool <= TARGET_RATIO * direct + TARGET_SLACK_MS else "misses"
    section.notes.append(
        f"{calls} tool calls and {calls} direct execs, interleaved (alternating which goes "
        "first), into one code-exec sandbox; the server is `openblox mcp`, spawned by the "
        "MCP SDK's client over stdio; wall time from the caller's side. Target: the tool "
        f"call's p50 within {TARGET_RATIO}x the direct exec's plus {TARGET_SLACK_MS:.0f} ms; "
        f"this run {verdict} it ({tool:.1f} ms vs {TARGET_RATIO}x {direct:.1f} + "
        f"{TARGET_SLACK_MS:.0f} = {TARGET_RATIO * direct + TARGET_SLACK_MS:.1f} ms)."
    )
