"""openblox.AsyncClient on the real cluster: many execs from one event loop, no thread each.

The async client runs on aiohttp (ADR 0010): every request and exec websocket is a
coroutine on the caller's loop. These tests show it on a real API server and kubelet
under gVisor: concurrent execs come back right and the process's thread count stays
flat; a bearer token (a ServiceAccount with the openblox-client role) works as well as
the admin's client certificate; bad input fails clearly and loses nothing running.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from openblox.client import AsyncClient, AsyncSandbox, InvalidArgument, SandboxGone
from openblox.transport.errors import CredentialsError
from tests.cluster.capacity import require_sandbox_room
from tests.cluster.kubectl import Kube
from tests.cluster.sandboxes import client_role_kubeconfig, opted_in_namespace

pytestmark = pytest.mark.cluster

# Enough calls in flight at once that a thread each would show, few enough that a code-exec
# sandbox (half a CPU) runs them well inside the profile's 60 s exec timeout on a shared
# node: 70 at a load average of 50 once had one end timed out (exit 137) unstarted.
CONCURRENT = 40

T = TypeVar("T")


@pytest.fixture(scope="module")
def async_ns(operator: Kube) -> Iterator[str]:
    with opted_in_namespace(operator, "t-async") as name:
        yield name


def _run(coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coroutine)


async def _peak_threads(done: asyncio.Event, seen: list[int]) -> None:
    while not done.is_set():
        seen.append(threading.active_count())
        await asyncio.sleep(0.005)


def test_many_concurrent_execs_from_one_loop_are_right_and_take_no_thread_each(
    operator: Kube, async_ns: str
) -> None:
    require_sandbox_room(operator, "code-exec")

    async def scenario() -> tuple[list[tuple[int, bytes, bool]], list[bytes], int, int]:
        async with (
            AsyncClient(async_ns, kubeconfig=operator.kubeconfig) as client,
            await client.create("code-exec", "many") as sandbox,
        ):
            await sandbox.exec(["true"])  # warm: the connection pool, TLS, the supervisor
            before = threading.active_count()
            done, seen = asyncio.Event(), [before]
            watcher = asyncio.create_task(_peak_threads(done, seen))
            results = await asyncio.gather(
                *(
                    sandbox.exec(["sh", "-c", "echo $0; exit $(($0 % 7))", str(i)])
                    for i in range(CONCURRENT)
                ),
                # stdin is written by a task on the same loop while output is read
                *(sandbox.exec(["cat"], stdin=f"in-{i}".encode()) for i in range(10)),
            )
            done.set()
            await watcher
            commands = [(r.exit_code, r.stdout, r.timed_out) for r in results[:CONCURRENT]]
            echoed = [r.stdout for r in results[CONCURRENT:]]
            return commands, echoed, before, max(seen)

    commands, echoed, before, peak = _run(scenario())
    expected = [(i % 7, f"{i}\n".encode(), False) for i in range(CONCURRENT)]
    pairs = enumerate(zip(commands, expected, strict=True))
    wrong = [(i, got) for i, (got, want) in pairs if got != want]
    assert not wrong, f"{len(wrong)} of {CONCURRENT} wrong (exit, stdout, timed_out): {wrong[:5]}"
    assert echoed == [f"in-{i}".encode() for i in range(10)]
    # 50 calls in flight at once; a thread per call would show as dozens more threads.
    assert peak <= before + 2, f"threads went from {before} to {peak} during the execs"


def test_async_stream_hands_output_over_as_it_comes(operator: Kube, async_ns: str) -> None:
    require_sandbox_room(operator, "code-exec")

    async def scenario() -> tuple[list[tuple[float, str, bytes]], int]:
        async with (
            AsyncClient(async_ns, kubeconfig=operator.kubeconfig) as client,
            await client.create("code-exec", "stream") as sandbox,
        ):
            loop = asyncio.get_running_loop()
            started = loop.time()
            arrivals = []
            async with await sandbox.stream(
                ["sh", "-c", "echo one; sleep 1.5; echo two >&2; exit 5"]
            ) as stream:
                async for chunk in stream:
                    arrivals.append((loop.time() - started, chunk.stream, chunk.data))
            return arrivals, stream.result.exit_code

    arrivals, code = _run(scenario())
    assert [(s, d) for _, s, d in arrivals] == [("stdout", b"one\n"), ("stderr", b"two\n")]
    assert arrivals[1][0] - arrivals[0][0] > 1.0, "the first line came only at the end"
    assert code == 5


def test_a_bearer_token_with_the_client_role_is_enough(
    operator: Kube, async_ns: str, tmp_path: Path
) -> None:
    require_sandbox_room(operator, "code-exec")
    kubeconfig = client_role_kubeconfig(operator, async_ns, tmp_path)

    async def scenario() -> tuple[str, bytes, int]:
        async with (
            AsyncClient(kubeconfig=kubeconfig) as client,
            await client.create("code-exec", "token") as sandbox,
        ):
            result = await sandbox.exec(["python3", "-c", "print(6*7)"])
            return client.namespace, result.stdout, len(await client.list())

    namespace, stdout, listed = _run(scenario())
    assert (namespace, stdout) == (async_ns, b"42\n")
    assert listed >= 1


def test_bad_input_fails_clearly_and_loses_nothing_running(
    operator: Kube, async_ns: str, tmp_path: Path
) -> None:
    require_sandbox_room(operator, "code-exec")
    missing = tmp_path / "no-such.kubeconfig"
    with pytest.raises(CredentialsError, match=r"no-such\.kubeconfig"):
        AsyncClient(kubeconfig=str(missing))

    async def bad_calls(sandbox: AsyncSandbox) -> list[str]:
        errors = []
        for call in (
            # A str is a Sequence[str] to a type checker: only the runtime check catches it.
            lambda: sandbox.exec("echo not a list"),
            lambda: sandbox.exec(["true"], timeout=10_000),
            lambda: sandbox.exec(["true"], output_limit=-1),
            lambda: sandbox.start_process("../escape", ["sleep", "1"]),
            lambda: sandbox.logs("web", stream="stdin"),
        ):
            with pytest.raises(InvalidArgument) as raised:
                await call()
            errors.append(str(raised.value))
        return errors

    async def scenario() -> tuple[list[str], bytes, bytes, bool, bool]:
        async with (
            AsyncClient(async_ns, kubeconfig=operator.kubeconfig) as client,
            await client.create("code-exec", "bad-input") as sandbox,
        ):
            await sandbox.files.write("/workspace/kept.txt", b"kept")
            started = await sandbox.start_process("web", ["sleep", "300"])
            running = asyncio.create_task(sandbox.exec(["sh", "-c", "sleep 2; echo finished"]))
            await asyncio.sleep(0.5)
            errors = await bad_calls(sandbox)
            with pytest.raises(SandboxGone):
                await client.get("no-such-sandbox")
            finished = await running
            kept = await sandbox.files.read("/workspace/kept.txt")
            still = [p for p in await sandbox.processes() if p.name == "web"]
            alive = bool(still) and still[0].running
            await sandbox.stop_process("web", grace=0.5)
            return errors, finished.stdout, kept, bool(started.started), alive

    errors, finished, kept, started, alive = _run(scenario())
    assert "not a shell string" in errors[0]
    assert all(errors), errors
    assert (finished, kept, started, alive) == (b"finished\n", b"kept", True, True)
