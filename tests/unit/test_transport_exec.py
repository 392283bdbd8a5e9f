"""`read_to_end`: every frame into one ExecOutput, and the socket closed however the stream
ended (the frames themselves are the transport's; faked here; the clients' own reader is
`client.cluster.read_to_end`, tested in test_client_bounds). And `abort`, which ends a
stream from another thread without waiting on the peer. The fake sockets serve both."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import AsyncIterator, Iterable, Iterator

import pytest
import websocket

from openblox.transport import STDERR, STDOUT, ExecOutput, ExecSocket, Frame
from openblox.transport.async_exec import AsyncExecSocket

FRAMES = [Frame(STDOUT, b"out"), Frame(STDERR, b"err"), Frame(3, b'{"status": "Success"}')]


class FakeSocket(ExecSocket):
    def __init__(self, frames: Iterable[Frame], then: Exception | None = None) -> None:
        self._frames, self._then, self.closed = frames, then, False

    def frames(self, deadline: float) -> Iterator[Frame]:
        yield from self._frames
        if self._then is not None:
            raise self._then

    def close(self) -> None:
        self.closed = True


class FakeAsyncSocket(AsyncExecSocket):
    def __init__(self, frames: Iterable[Frame], then: Exception | None = None) -> None:
        self._frames, self._then, self.closed = frames, then, False

    async def frames(self, deadline: float) -> AsyncIterator[Frame]:
        for frame in self._frames:
            yield frame
        if self._then is not None:
            raise self._then

    async def close(self) -> None:
        self.closed = True


def test_read_to_end_gathers_every_frame_and_closes() -> None:
    socket = FakeSocket(FRAMES)
    output = socket.read_to_end(0.0)
    assert (bytes(output.stdout), bytes(output.stderr), output.exit_code) == (b"out", b"err", 0)
    assert socket.closed


def test_read_to_end_keeps_what_came_before_the_stream_broke_and_still_closes() -> None:
    socket = FakeSocket(FRAMES[:1], then=TimeoutError("exec stream passed its deadline"))
    output = ExecOutput()
    with pytest.raises(TimeoutError):
        socket.read_to_end(0.0, output)
    assert (bytes(output.stdout), output.exit_code) == (b"out", None)
    assert socket.closed


def test_abort_ends_a_read_blocked_on_the_stream_at_once() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        stream = object.__new__(ExecSocket)
        stream._socket = websocket.WebSocket()
        stream._socket.sock = ours
        read: list[bytes] = []
        reader = threading.Thread(target=lambda: read.append(ours.recv(1)))
        reader.start()
        time.sleep(0.2)
        stream.abort()
        reader.join(2)
        assert read == [b""]
        stream.abort()  # again, on a stream already shut: nothing to do, nothing raised
    stream._socket.sock = None
    stream.abort()  # a stream whose socket is gone
