"""The exec channel protocol v5 (`v5.channel.k8s.io`), without I/O.

Every websocket message of an exec is one binary frame: a channel byte, then data.
Channels: 0 stdin, 1 stdout, 2 stderr, 3 the exec's final Status, 255 close (the next
byte names the channel being closed). v5 adds that close signal, so a command reading its
input sees end-of-file while its output is still flowing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from urllib.parse import quote, urlencode

from openblox.transport.errors import ExecOutputTooLarge, status_object

PROTOCOL = "v5.channel.k8s.io"
STDIN, STDOUT, STDERR, ERROR, CLOSE = 0, 1, 2, 3, 255
# Stdin goes up in pieces of at most this, so one large write is not one huge message.
STDIN_CHUNK_BYTES = 1 << 20
# What an accumulator keeps of each output channel unless its reader says otherwise:
# everything read back from a guest is bounded, a reader that forgot to say included.
KEEP_BYTES = 1 << 20
# The exec's final Status is a small JSON document from the kubelet; more is not one.
STATUS_BYTES = 64 * 1024


@dataclass(frozen=True)
class Frame:
    channel: int
    data: bytes


def decode_frame(payload: bytes) -> Frame | None:
    """The frame a binary message carries; None for an empty message (a keep-alive)."""
    if not payload:
        return None
    return Frame(payload[0], bytes(payload[1:]))


def stdin_messages(data: bytes, chunk: int = STDIN_CHUNK_BYTES) -> Iterator[bytes]:
    """The messages that send `data` on stdin, in order."""
    for start in range(0, len(data), chunk):
        yield bytes([STDIN]) + data[start : start + chunk]


def close_message(channel: int = STDIN) -> bytes:
    """The message that closes `channel` (stdin: the command reads end-of-file)."""
    return bytes([CLOSE, channel])


def exec_path(
    namespace: str,
    pod: str,
    container: str,
    argv: Sequence[str],
    *,
    stdin: bool,
    stdout: bool = True,
    stderr: bool = True,
) -> str:
    """The request path (with query) of `pods/exec` running argv in one container."""
    query = [("command", arg) for arg in argv]
    query += [
        ("container", container),
        ("stdout", _flag(stdout)),
        ("stderr", _flag(stderr)),
        ("stdin", _flag(stdin)),
    ]
    return (
        f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(pod, safe='')}"
        f"/exec?{urlencode(query)}"
    )


def websocket_url(server: str, path: str) -> str:
    """The ws:// or wss:// URL of `path` on the API server at `server` (http(s)://...)."""
    base = server.rstrip("/")
    if base.startswith("https://"):
        return "wss://" + base[len("https://") :] + path
    if base.startswith("http://"):
        return "ws://" + base[len("http://") :] + path
    raise ValueError(f"the API server address {server!r} is not http:// or https://")


def exit_code_from_status(data: bytes) -> int | None:
    """The exit code in the exec's final Status; None when it is not an exit status."""
    status = json.loads(data or b"{}")
    if status.get("status") == "Success":
        return 0
    for cause in (status.get("details") or {}).get("causes") or []:
        if cause.get("reason") == "ExitCode":
            return int(cause["message"])
    return None


def status_message(data: bytes) -> str:
    """What the exec's final Status says in words ("" when it says nothing): the container
    runtime's reason when it could not start the command, say."""
    return str(status_object(data).get("message") or "")


@dataclass
class ExecOutput:
    """What one exec's frames add up to: its stdout, its stderr and its final Status.

    `feed` every frame as it arrives. `keep_stdout` and `keep_stderr` bound what is kept of
    each (None: all of it; 0: none, for a reader that passes stdout on, as `feed` returns
    it); the bytes seen are counted either way. `limit_stdout` and `limit_stderr` bound
    what is accepted at all: the frame that goes past one raises ExecOutputTooLarge, so
    the reader stops there and closes the stream (its `finally` does) instead of reading
    on what a guest may send for as long as it likes. The Status, on the error channel,
    may come in more than one message, as stdout may (client-go reads that stream to its
    end too); more than STATUS_BYTES of it is refused the same way.
    """

    keep_stdout: int | None = KEEP_BYTES
    keep_stderr: int | None = KEEP_BYTES
    limit_stdout: int | None = None
    limit_stderr: int | None = None
    stdout: bytearray = field(default_factory=bytearray)
    stderr: bytearray = field(default_factory=bytearray)
    status: bytes = b""
    stdout_seen: int = 0
    stderr_seen: int = 0

    @classmethod
    def bounded(cls, stdout: int, stderr: int) -> ExecOutput:
        """An accumulator for an answer read whole: each channel is kept up to its bound,
        and the reading stops past it."""
        return cls(keep_stdout=stdout, keep_stderr=stderr, limit_stdout=stdout, limit_stderr=stderr)

    def feed(self, frame: Frame) -> bytes:
        """Take one frame; what it carried on stdout (b"" for any other channel).
        ExecOutputTooLarge once a channel went past its limit."""
        if frame.channel == STDOUT:
            self.stdout_seen += len(frame.data)
            _check("stdout", self.stdout_seen, self.limit_stdout)
            _keep(self.stdout, frame.data, self.keep_stdout)
            return frame.data
        if frame.channel == STDERR:
            self.stderr_seen += len(frame.data)
            _check("stderr", self.stderr_seen, self.limit_stderr)
            _keep(self.stderr, frame.data, self.keep_stderr)
        elif frame.channel == ERROR:
            _check("status", len(self.status) + len(frame.data), STATUS_BYTES)
            self.status += frame.data
        return b""

    @property
    def exit_code(self) -> int | None:
        """The exit code the Status gives; None without a Status (the stream closed before
        one came) or with one that is not an exit status."""
        return exit_code_from_status(self.status) if self.status else None

    @property
    def truncated(self) -> bool:
        """Whether more output came than was kept."""
        return self.stdout_seen + self.stderr_seen > len(self.stdout) + len(self.stderr)


def _check(channel: str, seen: int, limit: int | None) -> None:
    if limit is not None and seen > limit:
        raise ExecOutputTooLarge(channel, limit)


def _keep(target: bytearray, data: bytes, limit: int | None) -> None:
    room = len(data) if limit is None else limit - len(target)
    if room > 0:
        target += data[:room]


def refusal_message(status_code: int, body: bytes) -> str:
    """What to say when the API server refused the exec's upgrade with `status_code`."""
    try:
        message = str(json.loads(body).get("message") or "")
    except (ValueError, AttributeError):
        message = body.decode("utf-8", "replace")
    return f"exec refused ({status_code}): {message}".rstrip(": ")


def _flag(value: bool) -> str:
    return "true" if value else "false"
