"""Both clients, each test run once through `Client` and once through `AsyncClient`, over one
scripted cluster (`client_fakes`): the same requests, the same execs, the same answers and
errors. The plans decide; these tests hold that each shell performs what they ask."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import pytest

from openblox.client import (
    AdmissionDenied,
    AsyncClient,
    Client,
    ExecTransportError,
    FileOperationError,
    InvalidArgument,
    OutputChunk,
    SandboxGone,
    SandboxStalled,
    findings,
)
from openblox.client.cluster import sandboxes_path
from openblox.client.launch import NATIVE_SUPERVISOR, SUPERVISOR_ARGV
from openblox.transport import AuthorizerRefused, Conflict, Forbidden, Frame, NotFound
from openblox.transport.errors import ExecStreamError, api_error
from tests.unit.client_fakes import (
    SUCCESS,
    Script,
    both,
    call,
    framed,
    make_client,
    sandbox_body,
    supervised,
)

Shell = type[Client] | type[AsyncClient]
BOXES = sandboxes_path("ns")
BOX = sandboxes_path("ns", "box")
POD = "/api/v1/namespaces/ns/pods/box-pod"
MISSING_SUPERVISOR = json.dumps(
    {"status": "Failure", "message": f"exec: {NATIVE_SUPERVISOR}: no such file or directory"}
).encode()


def _ready_handle(shell: Shell, script: Script) -> Any:
    script.on("GET", BOX, sandbox_body())
    return call(make_client(shell, script).get("box"))


@both
def test_create_posts_the_sandbox_and_waits_on_a_watch_until_ready(shell: Shell) -> None:
    script = Script().on("POST", BOXES, sandbox_body(ready=False))
    script.watches = [[{"type": "MODIFIED", "object": sandbox_body()}]]
    client = make_client(shell, script)
    sandbox = call(client.create("code-exec", name="box"))
    assert (sandbox.name, sandbox.pod, sandbox.profile) == ("box", "box-pod", "code-exec")
    assert script.requests == [("POST", BOXES), ("WATCH", "")]
    assert repr(sandbox) == f"{type(sandbox).__name__}(ns/box, profile=code-exec)"


@both
def test_create_tells_a_name_taken_by_another_profile_and_a_refusal(shell: Shell) -> None:
    taken = dict(sandbox_body(), spec={"profile": "other"})
    script = Script().on("POST", BOXES, Conflict(409, "AlreadyExists", "exists"))
    script.on("GET", BOX, taken)
    client = make_client(shell, script)
    with pytest.raises(InvalidArgument, match="exists with profile other"):
        call(client.create("code-exec", name="box"))
    script.answers[("POST", BOXES)] = [Forbidden(403, "Forbidden", "profile not allowed")]
    with pytest.raises(AdmissionDenied, match="sandbox refused"):
        call(client.create("code-exec", name="box"))
    # RBAC's refusal is about the caller's credentials: no denial record is made of it.
    rbac = 'sandboxes.openblox.sh is forbidden: User "u" cannot create resource "sandboxes"'
    script.answers[("POST", BOXES)] = [
        api_error(403, "Forbidden", json.dumps({"kind": "Status", "message": rbac}))
    ]
    with pytest.raises(AuthorizerRefused, match="cannot create resource"):
        call(client.create("code-exec", name="box"))


@both
def test_get_list_delete_and_profiles(shell: Shell) -> None:
    script = Script().on("GET", BOXES, {"items": [sandbox_body("a"), sandbox_body("b")]})
    script.on("DELETE", BOX, NotFound(404, "NotFound", "gone"))  # already gone: no error
    script.on("GET", sandboxes_path("ns", "absent"), NotFound(404, "NotFound", "absent"))
    script.on("GET", "/api/v1/namespaces/openblox-system/configmaps/openblox-profile-admission",
              {"data": {"b-profile": "{}", "a-profile": "{}"}})  # fmt: skip
    client = make_client(shell, script)
    assert [s.name for s in call(client.list())] == ["a", "b"]
    call(client.delete("box"))
    assert call(client.profiles()) == ["a-profile", "b-profile"]
    with pytest.raises(SandboxGone, match="does not exist"):
        call(client.get("absent"))


@both
def test_exec_runs_under_the_native_supervisor_and_stamps_activity(shell: Shell) -> None:
    script = Script()
    sandbox = _ready_handle(shell, script)
    script.execs = [supervised(b"42\n")]
    result = call(sandbox.exec(["python3", "-c", "print(6*7)"], stdin="data"))
    assert (result.stdout, result.exit_code, result.ok) == (b"42\n", 0, True)
    assert script.argv[0][0] == NATIVE_SUPERVISOR
    assert script.argv[0][-4:] == ["--", "python3", "-c", "print(6*7)"]
    assert ("PATCH", BOX) in script.requests
    (socket,) = script.sockets
    assert socket.closed and bytes(socket.stdin) == b"data"


@both
def test_an_image_without_the_native_supervisor_runs_the_python_one(shell: Shell) -> None:
    script = Script()
    sandbox = _ready_handle(shell, script)
    script.execs = [[Frame(3, MISSING_SUPERVISOR)], supervised(b"ok"), supervised(b"again")]
    assert call(sandbox.exec(["true"])).stdout == b"ok"
    assert call(sandbox.exec(["true"])).stdout == b"again"  # remembered for the pod
    assert [argv[: len(SUPERVISOR_ARGV)] == list(SUPERVISOR_ARGV) for argv in script.argv] == [
        False,
        True,
        True,
    ]
    assert all(socket.closed for socket in script.sockets)


@both
def test_stream_hands_output_over_as_it_comes_and_keeps_the_result(shell: Shell) -> None:
    script = Script()
    sandbox = _ready_handle(shell, script)
    data = framed(b"S", b"") + framed(b"O", b"one ") + framed(b"E", b"two")
    verdict = {"exit_code": 3, "timed_out": False, "truncated": False, "signal": 0}
    script.execs = [[Frame(1, data), Frame(1, framed(b"R", json.dumps(verdict).encode())), SUCCESS]]

    async def read_async() -> tuple[list[OutputChunk], Any]:
        async with await sandbox.stream(["sh"]) as stream:
            chunks = [chunk async for chunk in stream]
        return chunks, stream.result

    if shell is AsyncClient:
        chunks, result = asyncio.run(read_async())
    else:
        with sandbox.stream(["sh"]) as stream:
            chunks = list(stream)
        result = stream.result
    assert chunks == [OutputChunk("stdout", b"one "), OutputChunk("stderr", b"two")]
    assert (result.exit_code, result.stdout, result.stderr) == (3, b"one ", b"two")


@both
@pytest.mark.parametrize("signal", [9, 11])
def test_a_kill_after_the_sandbox_stalled_is_sandbox_stalled_not_a_result(
    shell: Shell, signal: int
) -> None:
    """gVisor ends a process whose systrap stub stalled (a frozen node): the exit is not
    the command's, so no result and no memory denial; a stall too short for that, or one
    beside an exit of the command's own, leaves the result as it was."""
    script = Script()
    sandbox = _ready_handle(shell, script)

    def ending(code: int, killed_by: int | None, stalled: float) -> list[Frame]:
        verdict: dict[str, object] = {"exit_code": code, "timed_out": False}
        verdict |= {"truncated": False, "signal": killed_by, "stalled": stalled}
        data = (
            framed(b"S", b"")
            + framed(b"O", b"partial")
            + framed(b"R", json.dumps(verdict).encode())
        )
        return [Frame(1, data), SUCCESS]

    script.execs = [ending(128 + signal, signal, 38.5), ending(137, 9, 4.9), ending(3, None, 40.0)]
    script.execs += [ending(128 + signal, signal, 38.5), supervised(b"kept")]
    with pytest.raises(SandboxStalled, match=r"stalled for 38\.5 s") as raised:
        call(sandbox.exec(["python3", "-c", "print(6*7)"]))
    error = raised.value
    assert (error.exit_code, error.signal, error.stalled) == (128 + signal, signal, 38.5)
    assert error.stdout == b"partial"
    short = call(sandbox.exec(["true"]))
    assert (short.exit_code, [d.denied for d in short.denials]) == (137, ["memory"])
    assert call(sandbox.exec(["true"])).exit_code == 3
    # A file operation is idempotent: one gVisor ended runs once more.
    assert call(sandbox.read_file("/workspace/a")) == b"kept"


@both
def test_a_stream_left_early_is_closed_and_has_no_result(shell: Shell) -> None:
    script = Script()
    sandbox = _ready_handle(shell, script)
    script.execs = [supervised(b"x" * 10, b"y")]

    async def leave_async() -> Any:
        async with await sandbox.stream(["sh"]) as stream:
            async for _ in stream:
                break
        return stream

    if shell is AsyncClient:
        stream = asyncio.run(leave_async())
    else:
        with sandbox.stream(["sh"]) as stream:
            next(iter(stream))
    assert script.sockets[0].closed
    with pytest.raises(RuntimeError, match="known once its output has been read"):
        stream.result  # noqa: B018


@both
def test_files_go_through_the_helper_on_both_handles(shell: Shell) -> None:
    script = Script()
    sandbox = _ready_handle(shell, script)
    script.execs = [supervised(), supervised(b"hello"), supervised(b"hel")]
    call(sandbox.write_file("/workspace/a", "hello"))
    assert script.sockets[0].stdin == b"hello"
    assert call(sandbox.read_file("/workspace/a")) == b"hello"
    with pytest.raises(FileOperationError, match="larger than the read limit of 2 bytes"):
        call(sandbox.files.read("/workspace/a", limit=2))
    script.execs = [supervised(b"", b"no such file", exit_code=1), supervised(exit_code=137)]
    with pytest.raises(FileOperationError, match="/workspace/b: no such file"):
        call(sandbox.files.remove("/workspace/b"))
    with pytest.raises(FileOperationError, match=r"/workspace/b: .*exit 137 and no message"):
        call(sandbox.files.remove("/workspace/b"))


@both
def test_a_broken_stream_with_the_pod_still_running_is_a_transport_error(
    shell: Shell, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(findings, "POD_END_WAIT_SECONDS", 0.0)
    script = Script()
    sandbox = _ready_handle(shell, script)
    script.on("GET", POD, {"metadata": {"name": "box-pod"}, "status": {"phase": "Running"}})
    script.execs = [[Frame(1, framed(b"S", b""))]]  # no verdict, no Status
    with pytest.raises(ExecTransportError, match="ended without a result from the sandbox's"):
        call(sandbox.exec(["true"]))
    script.answers[("GET", POD)] = [ConnectionRefusedError("refused")]
    script.execs = [[Frame(1, framed(b"S", b""))]]
    with pytest.raises(ExecTransportError, match="cannot be reached to learn why") as raised:
        call(sandbox.exec(["true"]))
    assert isinstance(raised.value.__cause__, ConnectionRefusedError)


@both
def test_an_exec_refused_by_a_pod_being_deleted_is_sandbox_gone(shell: Shell) -> None:
    # containerd 2 refuses an exec into a pod being deleted with its own words (500).
    refused = ExecStreamError('exec refused (500): container not found ("sandbox")', 500)
    script = Script()
    sandbox = _ready_handle(shell, script)
    script.on(
        "GET", POD, {"metadata": {"name": "box-pod", "deletionTimestamp": "2026-12-06T02:21:29Z"}}
    )
    script.execs = [refused]
    with pytest.raises(SandboxGone, match="is being deleted"):
        call(sandbox.exec(["true"]))
    script.answers[("GET", POD)] = [NotFound(404, "NotFound", "gone")]
    script.execs = [refused]
    with pytest.raises(SandboxGone, match="does not exist"):
        call(sandbox.exec(["true"]))
    # The same refusal from a pod that is not ending is the transport's, with its status.
    script.answers[("GET", POD)] = [
        {"metadata": {"name": "box-pod"}, "status": {"phase": "Running"}}
    ]
    script.execs = [refused]
    with pytest.raises(ExecTransportError, match="container not found") as raised:
        call(sandbox.exec(["true"]))
    assert raised.value.status_code == 500


@both
def test_background_commands_are_the_supervisors_control_modes(shell: Shell) -> None:
    script = Script()
    sandbox = _ready_handle(shell, script)
    listed = {"name": "web", "running": True, "argv": ["sh"], "pid": 7}
    script.execs = [[Frame(1, json.dumps(listed).encode() + b"\n"), SUCCESS]]
    (process,) = call(sandbox.processes())
    assert (process.name, process.running) == ("web", True)
    assert script.argv[0][: len(SUPERVISOR_ARGV)] == list(SUPERVISOR_ARGV)
    assert script.argv[0][len(SUPERVISOR_ARGV)] == "ps"


@both
def test_a_preview_link_is_signed_with_the_published_key(shell: Shell) -> None:
    script = Script()
    sandbox = _ready_handle(shell, script)
    keys = {"current": base64.b64encode(b"k1").decode(), "k1": base64.b64encode(b"k" * 32).decode()}
    script.on("GET", "/api/v1/namespaces/openblox-system/secrets/openblox-preview-keys",
              {"data": keys})  # fmt: skip
    script.on("GET", "/api/v1/namespaces/openblox-system/configmaps/openblox-preview",
              {"data": {"baseURL": "https://preview.example/"}})  # fmt: skip
    url = call(sandbox.preview_url(8000, ttl=60))
    assert url.startswith("https://preview.example/p/") and url.endswith("/")
    assert call(sandbox.preview_url(8000, base_url="http://b")).startswith("http://b/p/")
