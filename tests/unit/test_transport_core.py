"""The transport's pure core: exec framing, typed API errors, requests and watch events."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from openblox.transport import errors, frames, rest


def test_stdin_goes_up_in_channel_zero_messages_of_bounded_size() -> None:
    messages = list(frames.stdin_messages(b"abcdefg", chunk=3))
    assert messages == [b"\x00abc", b"\x00def", b"\x00g"]
    assert list(frames.stdin_messages(b"")) == []


def test_closing_stdin_is_the_v5_close_frame() -> None:
    assert frames.close_message() == bytes([255, 0])


def test_a_frame_keeps_its_bytes_exact() -> None:
    frame = frames.decode_frame(b"\x01\x00\xffbinary\n")
    assert frame == frames.Frame(frames.STDOUT, b"\x00\xffbinary\n")
    assert frames.decode_frame(b"") is None


def test_the_exec_path_carries_argv_verbatim_and_in_order() -> None:
    target = frames.exec_path("ns", "pod-1", "sandbox", ["sh", "-c", "echo a&b=c"], stdin=True)
    assert target.startswith("/api/v1/namespaces/ns/pods/pod-1/exec?")
    query = target.split("?", 1)[1]
    assert query == (
        "command=sh&command=-c&command=echo+a%26b%3Dc"
        "&container=sandbox&stdout=true&stderr=true&stdin=true"
    )


def test_the_websocket_url_follows_the_servers_scheme() -> None:
    assert frames.websocket_url("https://h:6443/", "/x") == "wss://h:6443/x"
    assert frames.websocket_url("http://127.0.0.1:8001", "/x") == "ws://127.0.0.1:8001/x"
    with pytest.raises(ValueError, match="not http"):
        frames.websocket_url("ftp://h", "/x")


@pytest.mark.parametrize(
    ("status", "code"),
    [
        ({"status": "Success"}, 0),
        (
            {
                "status": "Failure",
                "reason": "NonZeroExitCode",
                "details": {"causes": [{"reason": "ExitCode", "message": "42"}]},
            },
            42,
        ),
        ({"status": "Failure", "message": "container not found"}, None),
    ],
)
def test_the_exit_code_comes_from_the_final_status(status: dict[str, object], code: int) -> None:
    assert frames.exit_code_from_status(json.dumps(status).encode()) == code


def _frames(*messages: tuple[int, bytes]) -> list[frames.Frame]:
    return [frames.Frame(channel, data) for channel, data in messages]


EXIT_42 = json.dumps(
    {
        "status": "Failure",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": "42"}]},
    }
).encode()


def test_exec_output_joins_each_stream_across_messages_as_they_interleave() -> None:
    output = frames.ExecOutput()
    passed_on = [
        output.feed(frame)
        for frame in _frames(
            (frames.STDOUT, b"hel"),
            (frames.STDERR, b"warn"),
            (frames.STDOUT, b"lo\n"),
            (frames.STDERR, b"ing\n"),
            (frames.CLOSE, bytes([frames.STDIN])),
        )
    ]
    assert passed_on == [b"hel", b"", b"lo\n", b"", b""]  # feed hands stdout on
    assert (bytes(output.stdout), bytes(output.stderr)) == (b"hello\n", b"warning\n")
    assert (output.stdout_seen, output.stderr_seen, output.truncated) == (6, 8, False)


def test_exec_output_takes_the_exit_code_from_the_error_channels_status() -> None:
    output = frames.ExecOutput()
    # The Status may come in more than one message: it is read to its end, like stdout.
    for frame in _frames((frames.STDOUT, b"x"), (3, EXIT_42[:10]), (3, EXIT_42[10:])):
        output.feed(frame)
    assert output.status == EXIT_42
    assert output.exit_code == 42
    success = frames.ExecOutput()
    success.feed(frames.Frame(frames.ERROR, b'{"status": "Success"}'))
    assert success.exit_code == 0


def test_exec_output_of_a_stream_closed_without_a_status_has_no_exit_code() -> None:
    output = frames.ExecOutput()
    for frame in _frames((frames.STDOUT, b"partial"), (frames.CLOSE, bytes([frames.STDIN]))):
        output.feed(frame)
    assert output.status == b""
    assert output.exit_code is None
    assert output.stdout == b"partial"


def test_exec_output_keeps_at_most_its_bound_of_each_stream_and_counts_the_rest() -> None:
    output = frames.ExecOutput(keep_stdout=4, keep_stderr=0)
    for frame in _frames((frames.STDOUT, b"abc"), (frames.STDOUT, b"def"), (frames.STDERR, b"e")):
        output.feed(frame)
    assert (bytes(output.stdout), bytes(output.stderr)) == (b"abcd", b"")
    assert (output.stdout_seen, output.stderr_seen) == (6, 1)
    assert output.truncated
    # keep_stdout=0: a reader that passes stdout on still gets every byte from feed.
    passing = frames.ExecOutput(keep_stdout=0)
    assert passing.feed(frames.Frame(frames.STDOUT, b"body")) == b"body"
    assert passing.stdout == b""


def test_a_refused_upgrade_says_the_api_servers_message() -> None:
    body = json.dumps({"kind": "Status", "message": 'pods "x" not found'}).encode()
    assert frames.refusal_message(404, body) == 'exec refused (404): pods "x" not found'
    assert frames.refusal_message(502, b"bad gateway") == "exec refused (502): bad gateway"
    assert frames.refusal_message(403, b"") == "exec refused (403)"


def _status(code: int, reason: str, message: str) -> bytes:
    return json.dumps(
        {"kind": "Status", "status": "Failure", "code": code, "reason": reason, "message": message}
    ).encode()


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (400, errors.BadRequest),
        (401, errors.Unauthorized),
        (403, errors.Forbidden),
        (404, errors.NotFound),
        (409, errors.Conflict),
        (410, errors.Gone),
        (422, errors.Invalid),
        (429, errors.TooManyRequests),
        (418, errors.ClientError),
        (503, errors.ServerError),
    ],
)
def test_each_status_raises_its_own_type(code: int, kind: type[errors.ApiError]) -> None:
    error = errors.api_error(code, "Reason", _status(code, "SomeReason", "what happened"))
    assert type(error) is kind
    assert isinstance(error, errors.ApiError)
    assert error.status == code
    assert error.status_reason == "SomeReason"
    assert error.message == "what happened"
    assert str(error) == f"{code} Reason: what happened"


def test_an_admission_refusal_carries_the_policys_message() -> None:
    message = "ValidatingAdmissionPolicy 'openblox-sandbox-profile' denied request: no profile"
    error = errors.api_error(422, "Unprocessable Entity", _status(422, "Invalid", message))
    assert isinstance(error, errors.Invalid)
    assert error.message == message


@pytest.mark.parametrize(
    "message",
    [
        'sandboxes.openblox.sh is forbidden: User "system:serviceaccount:a:app" cannot create '
        'resource "sandboxes" in API group "openblox.sh" in the namespace "b"',
        'pods "box-pod" is forbidden: User "jane" cannot create resource "pods/exec" in API '
        'group "" in the namespace "b": RBAC: role.rbac.authorization.k8s.io "x" not found',
        'nodes is forbidden: User "say \\"hi\\"" cannot list resource "nodes" in API group "" '
        "at the cluster scope",
    ],
)
def test_the_authorizers_refusal_is_told_from_admissions(message: str) -> None:
    error = errors.api_error(403, "Forbidden", _status(403, "Forbidden", message))
    assert type(error) is errors.AuthorizerRefused
    assert isinstance(error, errors.Forbidden) and error.message == message


@pytest.mark.parametrize(
    "message",
    [
        'sandboxes.openblox.sh "box" is forbidden: ValidatingAdmissionPolicy '
        "'openblox-sandbox-profile' with binding 'b' denied request: profile not allowed",
        'pods "p" is forbidden: violates PodSecurity "restricted:latest": privileged',
        'sandboxes.openblox.sh "box" is forbidden: unable to create new content in namespace b '
        "because it is being terminated",
        # Words a policy chose cannot pass for the authorizer's: they come after its own.
        "sandboxes.openblox.sh \"box\" is forbidden: ValidatingAdmissionPolicy 'p' denied "
        'request: User "x" cannot create resource',
        "",
    ],
)
def test_other_refusals_stay_forbidden(message: str) -> None:
    error = errors.api_error(403, "Forbidden", _status(403, "Forbidden", message))
    assert type(error) is errors.Forbidden


def test_a_body_that_is_not_a_status_is_cut_not_trusted() -> None:
    error = errors.api_error(502, "Bad Gateway", b"<html>" + b"x" * 5000)
    assert error.status_reason == ""
    assert error.message.startswith("<html>")
    assert len(error.message) == errors.TEXT_BODY_LIMIT
    pod = errors.api_error(409, "Conflict", json.dumps({"kind": "Pod", "message": "no"}))
    assert pod.message != "no" and pod.status_reason == ""


def test_the_operators_predicates_read_the_status() -> None:
    terminating = errors.api_error(403, "Forbidden", _status(403, "Forbidden", "x"))
    assert not errors.is_namespace_terminating(terminating)
    body = json.dumps({"kind": "Status", "reason": "Forbidden", "details": {}})
    body = body.replace("{}", '{"causes": [{"reason": "NamespaceTerminating"}]}')
    assert errors.is_namespace_terminating(errors.api_error(403, "Forbidden", body))
    assert errors.is_not_found(errors.ApiError(404, "NotFound"))
    assert errors.is_conflict(errors.Conflict(409, "Conflict"))
    assert errors.status_of(ValueError()) is None


def test_request_paths_and_targets() -> None:
    assert rest.path(plural="pods", namespace="a b", name="p") == "/api/v1/namespaces/a%20b/pods/p"
    assert (
        rest.path(group="openblox.sh", version="v1alpha1", plural="sandboxes", namespace="n")
        == "/apis/openblox.sh/v1alpha1/namespaces/n/sandboxes"
    )
    assert rest.path(plural="leases", subresource="status", name="l") == "/api/v1/leases/l/status"
    assert rest.target("/prefix", "/api/v1/pods", {"a": 1, "b": None}) == "/prefix/api/v1/pods?a=1"
    assert rest.target("", "/x", {}) == "/x"


def test_a_watch_starts_after_the_version_it_was_given() -> None:
    params = rest.watch_params({"fieldSelector": "x"}, resource_version="7", timeout_seconds=5)
    assert params == {
        "fieldSelector": "x",
        "watch": "1",
        "resourceVersion": "7",
        "timeoutSeconds": 5,
        "allowWatchBookmarks": "false",
    }
    asked = rest.watch_params({}, resource_version="7", timeout_seconds=5, bookmarks=True)
    assert asked["allowWatchBookmarks"] == "true"


def test_watch_lines_are_events_and_an_error_event_raises_its_type() -> None:
    event = rest.watch_event(b'{"type":"MODIFIED","object":{"kind":"Pod"}}\n')
    assert event == {"type": "MODIFIED", "object": {"kind": "Pod"}}
    assert rest.watch_event(b"\n") is None
    expired = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}
    with pytest.raises(errors.Gone) as raised:
        rest.watch_event(json.dumps(expired).encode())
    assert raised.value.status_reason == "Expired"


def test_headers_carry_the_token_and_the_content_type() -> None:
    sent = rest.headers({"Authorization": "Bearer t"}, rest.MERGE_PATCH, "openblox-test")
    assert sent == {
        "Accept": "application/json",
        "User-Agent": "openblox-test",
        "Authorization": "Bearer t",
        "Content-Type": "application/merge-patch+json",
    }
    assert "Content-Type" not in rest.headers({}, None, "x")


def _channel_tests(source: str) -> int:
    """How many comparisons in `source` look at a frame's `.channel`."""
    return sum(
        1
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Compare)
        and any(
            isinstance(side, ast.Attribute) and side.attr == "channel"
            for side in (node.left, *node.comparators)
        )
    )


def test_only_exec_output_sorts_exec_frames_by_channel() -> None:
    """One accumulator (`frames.ExecOutput`) reads every exec's channels: nothing else in
    the package or the benchmarks sorts frames by channel itself."""
    repository = Path(__file__).parents[2]
    package = repository / "operator" / "openblox"
    files = [*package.rglob("*.py"), *(repository / "bench").rglob("*.py")]
    readers = [
        str(path.relative_to(repository))
        for path in sorted(files)
        if path != package / "transport" / "frames.py"
        and package / "guest" not in path.parents
        and _channel_tests(path.read_text())
    ]
    assert readers == []
    assert _channel_tests("if frame.channel == STDOUT:\n    pass\n") == 1
