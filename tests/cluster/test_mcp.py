"""`openblox mcp` on the real cluster, driven by the MCP SDK's own client over stdio.

Each test spawns the `openblox` command as an agent would, with the test's kubeconfig
(the caller's own identity), and talks to it only through the protocol.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import pytest
from mcp import Client as McpClient
from mcp import StdioServerParameters
from mcp.types import CallToolResult

from tests.cluster.capacity import require_sandbox_room
from tests.cluster.kubectl import Kube
from tests.cluster.sandboxes import get_sandbox, opted_in_namespace, wait_for

pytestmark = pytest.mark.cluster

OPENBLOX = str(Path(sys.executable).parent / "openblox")
FETCH = """\
import sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=5) as response:
    print(response.read().decode())
"""


@pytest.fixture(scope="module")
def mcp_ns(operator: Kube) -> Iterator[str]:
    with opted_in_namespace(operator, "t-mcp") as name:
        yield name


def server(kube: Kube, namespace: str, *extra: str, pidfile: Path | None = None) -> McpClient:
    """An MCP client that spawns `openblox mcp` over stdio, as an agent's config would."""
    argv = [OPENBLOX, "--kubeconfig", kube.kubeconfig, "-n", namespace, "mcp", *extra]
    if pidfile is None:
        return McpClient(StdioServerParameters(command=argv[0], args=argv[1:]))
    # Through a shell that records its pid and then becomes the server, so a test can kill it.
    return McpClient(
        StdioServerParameters(
            command="/bin/sh", args=["-c", 'echo $$ > "$0"; exec "$@"', str(pidfile), *argv]
        )
    )


def structured(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, text(result)
    assert result.structured_content is not None
    return dict(result.structured_content)


def text(result: CallToolResult) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


def error(result: CallToolResult) -> str:
    assert result.is_error, result.structured_content
    return text(result)


def run(session: Callable[[], Awaitable[None]]) -> None:
    anyio.run(session)


def sandbox_names(kube: Kube, namespace: str) -> set[str]:
    out = kube.kubectl("get", "sandboxes", "-n", namespace, "-o", "json")
    return {item["metadata"]["name"] for item in json.loads(out.stdout)["items"]}


def test_run_denial_loop_files_and_bad_input_over_stdio(operator: Kube, mcp_ns: str) -> None:
    require_sandbox_room(operator, "code-exec")
    before = sandbox_names(operator, mcp_ns)
    made: list[str] = []

    async def session() -> None:
        async with server(operator, mcp_ns) as client:
            tools = {tool.name for tool in (await client.list_tools()).tools}
            assert {"run_python", "run_command", "write_file", "read_file"} <= tools

            answer = structured(await client.call_tool("run_python", {"code": "print(6*7)"}))
            assert (answer["stdout"], answer["exit_code"], answer["denials"]) == ("42\n", 0, [])
            made.append(answer["sandbox"])
            assert get_sandbox(operator, answer["sandbox"], mcp_ns) is not None

            # The network is off by policy: a structured record, not a stack trace alone.
            written = await client.call_tool("write_file", {"path": "fetch.py", "content": FETCH})
            assert structured(written) == {"path": "/workspace/fetch.py", "bytes": len(FETCH)}
            first = structured(
                await client.call_tool(
                    "run_command",
                    {"argv": ["python3", "fetch.py", "http://10.96.0.1:443/data.json"]},
                )
            )
            assert first["exit_code"] != 0
            (record,) = first["denials"]
            assert (record["denied"], record["because"]) == ("network", "egress=none")
            assert record["attempted"] == "10.96.0.1:443"
            assert any("127.0.0.1" in note for note in first["notes"])

            # The adaptation the record asks for: serve the data on loopback instead.
            await client.call_tool(
                "write_file", {"path": "/workspace/data.json", "content": '{"answer": 42}'}
            )
            started = structured(
                await client.call_tool(
                    "start_process",
                    {
                        "name": "data",
                        "argv": ["python3", "-m", "http.server", "8001", "--bind", "127.0.0.1"],
                    },
                )
            )
            assert started["running"] and started["started"]
            second: dict[str, Any] = {}
            for _ in range(50):
                second = structured(
                    await client.call_tool(
                        "run_command",
                        {"argv": ["python3", "fetch.py", "http://127.0.0.1:8001/data.json"]},
                    )
                )
                if second["exit_code"] == 0:
                    break
                await anyio.sleep(0.2)
            assert second["exit_code"] == 0, second["stderr"]
            assert json.loads(second["stdout"]) == {"answer": 42}
            assert second["denials"] == []

            # Files round-trip, text and bytes; a listing shows them.
            await client.call_tool(
                "write_file", {"path": "/tmp/b.bin", "content": "AP8=", "encoding": "base64"}
            )
            back = structured(await client.call_tool("read_file", {"path": "/tmp/b.bin"}))
            assert (back["encoding"], back["content"], back["size"]) == ("base64", "AP8=", 2)
            read = structured(await client.call_tool("read_file", {"path": "data.json"}))
            assert read["content"] == '{"answer": 42}' and read["encoding"] == "utf-8"
            listing = structured(await client.call_tool("list_files", {}))
            assert {"fetch.py", "data.json"} <= {e["name"] for e in listing["entries"]}

            # Errors the model can act on, each a tool error with words.
            missing = error(await client.call_tool("read_file", {"path": "nope.txt"}))
            assert "/workspace/nope.txt" in missing and "No such file" in missing
            profile = structured(await client.call_tool("list_profiles", {}))["profiles"][0]
            assert profile["name"] == "code-exec" and profile["sandbox"] == answer["sandbox"]
            too_long = profile["timeout_seconds"] + 1
            above = error(
                await client.call_tool(
                    "run_python", {"code": "print(1)", "timeout_seconds": too_long}
                )
            )
            assert f"above the profile's {profile['timeout_seconds']:.0f}s" in above
            negative = error(
                await client.call_tool("run_python", {"code": "1", "timeout_seconds": -1})
            )
            assert "timeout_seconds" in negative and "greater than 0" in negative
            outside = error(
                await client.call_tool("write_file", {"path": "/etc/passwd", "content": "x"})
            )
            assert "outside the writable places" in outside
            wrong_type = error(await client.call_tool("run_command", {"argv": "ls -la"}))
            assert "argv" in wrong_type and "valid list" in wrong_type
            unknown = error(await client.call_tool("stop_process", {"name": "never-started"}))
            assert "never-started" in unknown

            # A timeout is a result, not a hang, and says what happened.
            slow = structured(
                await client.call_tool(
                    "run_python", {"code": "import time; time.sleep(30)", "timeout_seconds": 1}
                )
            )
            assert slow["timed_out"] and any("timed out after 1s" in n for n in slow["notes"])

            # None of it cost the session anything: the sandbox, its files, its server.
            still = structured(await client.call_tool("read_file", {"path": "data.json"}))
            assert still["content"] == '{"answer": 42}'
            assert len(sandbox_names(operator, mcp_ns) - before) == 1
            ps = structured(await client.call_tool("list_processes", {}))["processes"]
            assert [p["name"] for p in ps if p["running"]] == ["data"]

    run(session)
    # The session ended: the server deleted its sandbox (gone, or going).
    wait_for("the session's sandbox to be deleted", lambda: deleted(operator, made[0], mcp_ns))


def deleted(kube: Kube, name: str, namespace: str) -> bool:
    body = get_sandbox(kube, name, namespace)
    return body is None or bool(body["metadata"].get("deletionTimestamp"))


def gone_with_its_pod(kube: Kube, name: str, pod: str, namespace: str) -> bool:
    """Sandbox and pod both gone: an exec can no longer reach the old pod as it stops."""
    found = kube.kubectl("get", "pod", pod, "-n", namespace, check=False)
    return get_sandbox(kube, name, namespace) is None and found.returncode != 0


def page(host: str, path: str) -> bytes | None:
    """The body of a 200 from the proxy, or None while the app is not answering yet."""
    connection = http.client.HTTPConnection(host, 80, timeout=30)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        body = response.read()
        return body if response.status == 200 else None
    except OSError:
        return None
    finally:
        connection.close()


def test_a_background_server_is_reached_through_the_preview_link(
    operator: Kube, mcp_ns: str
) -> None:
    require_sandbox_room(operator, "code-exec")
    proxy = operator.get("service", "openblox-preview", "openblox-system")["spec"]["clusterIP"]

    async def session() -> None:
        async with server(operator, mcp_ns) as client:
            made = await client.call_tool("run_command", {"argv": ["mkdir", "-p", "site"]})
            assert structured(made)["exit_code"] == 0
            written = await client.call_tool(
                "write_file", {"path": "site/index.html", "content": "<h1>from mcp</h1>"}
            )
            assert structured(written)["path"] == "/workspace/site/index.html"
            web = structured(
                await client.call_tool(
                    "start_process",
                    {
                        "name": "web",
                        "argv": ["python3", "-m", "http.server", "8000", "--bind", "127.0.0.1"],
                        "cwd": "/workspace/site",
                    },
                )
            )
            assert web["running"]
            link = structured(await client.call_tool("preview_link", {"port": 8000}))
            assert link["port"] == 8000 and "/p/" in link["url"]
            path = urlsplit(link["url"]).path
            # The link names the proxy's in-cluster address; this host reaches its ClusterIP.
            body = await anyio.to_thread.run_sync(
                lambda: wait_for(
                    "the page through the preview proxy",
                    lambda: page(proxy, path),
                    timeout=60,
                    every=1,
                )
            )
            assert body == b"<h1>from mcp</h1>"
            logs: dict[str, Any] = {}
            for _ in range(20):  # http.server logs each request on stderr, after replying
                logs = structured(
                    await client.call_tool("read_process_logs", {"name": "web", "stream": "stderr"})
                )
                if "GET / HTTP/1.1" in logs["data"]:
                    break
                await anyio.sleep(0.25)
            assert "GET / HTTP/1.1" in logs["data"], logs
            stopped = structured(await client.call_tool("stop_process", {"name": "web"}))
            assert not stopped["running"] and stopped["stopped"]

    run(session)


def test_a_killed_server_leaves_no_sandbox_past_its_idle_timeout(
    operator: Kube, mcp_ns: str, tmp_path: Path
) -> None:
    require_sandbox_room(operator, "code-exec")
    idle = 15
    pidfile = tmp_path / "server.pid"
    sandbox: dict[str, str] = {}

    async def session() -> None:
        with anyio.fail_after(120):
            await killed_session()

    async def killed_session() -> None:
        async with server(operator, mcp_ns, "--idle-timeout", str(idle), pidfile=pidfile) as c:
            result = structured(await c.call_tool("run_python", {"code": "print(6*7)"}))
            sandbox["name"] = result["sandbox"]
            # SIGKILL: no handler runs, nothing is deleted by the server.
            os.kill(int(pidfile.read_text()), signal.SIGKILL)
            killed_at["t"] = time.monotonic()

    killed_at: dict[str, float] = {}
    # The transport breaks under the client; how it reports that does not matter here.
    with contextlib.suppress(Exception):
        run(session)
    assert "t" in killed_at, "the server was never killed"
    name = sandbox["name"]
    body = get_sandbox(operator, name, mcp_ns)
    assert body is not None and not body["metadata"].get("deletionTimestamp"), (
        "the sandbox should outlive the killed server until the operator reaps it"
    )
    assert body["spec"]["idleTimeoutSeconds"] == idle
    wait_for(
        f"sandbox {name} to be reaped after {idle}s idle",
        lambda: get_sandbox(operator, name, mcp_ns) is None,
        timeout=idle + 45,
        every=1,
    )
    # Reaped by the idle timeout, not sooner (the client stamped activity at its exec).
    assert time.monotonic() - killed_at["t"] >= idle - 6


def test_a_reaped_sandbox_is_a_clear_error_and_the_next_call_starts_fresh(
    operator: Kube, mcp_ns: str
) -> None:
    require_sandbox_room(operator, "code-exec")
    idle = 6

    async def session() -> None:
        async with server(operator, mcp_ns, "--idle-timeout", str(idle)) as client:
            first = structured(await client.call_tool("run_python", {"code": "print(1)"}))
            await client.call_tool("write_file", {"path": "keep.txt", "content": "x"})
            name = first["sandbox"]
            pod = (get_sandbox(operator, name, mcp_ns) or {})["status"]["podName"]
            await anyio.to_thread.run_sync(
                lambda: wait_for(
                    f"sandbox {name} to be reaped",
                    lambda: gone_with_its_pod(operator, name, pod, mcp_ns),
                    timeout=idle + 45,
                    every=1,
                )
            )
            gone = error(await client.call_tool("read_file", {"path": "keep.txt"}))
            assert f"sandbox {name} no longer exists" in gone
            assert "next call starts a fresh" in gone
            fresh = structured(await client.call_tool("run_python", {"code": "print(6*7)"}))
            assert fresh["stdout"] == "42\n" and fresh["sandbox"] != name

    run(session)


def test_an_admission_refusal_is_a_clear_error_and_the_server_stays_up(operator: Kube) -> None:
    # A namespace that has not opted in: admission refuses every Sandbox there.
    closed = f"t-mcp-closed-{os.getpid()}"
    operator.kubectl("create", "namespace", closed)
    try:

        async def session() -> None:
            async with server(operator, closed) as client:
                for _ in range(2):
                    refused = error(await client.call_tool("run_python", {"code": "print(1)"}))
                    assert "the cluster refused to create the sandbox" in refused
                    assert '"denied": "admission"' in refused
                assert len((await client.list_tools()).tools) == 13

        run(session)
        assert sandbox_names(operator, closed) == set()
    finally:
        operator.kubectl("delete", "namespace", closed, "--wait=false", check=False)
