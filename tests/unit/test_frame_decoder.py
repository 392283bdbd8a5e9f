"""The client's reading of the supervisor's framed stdout, and when it falls back.

The command shares a uid with the supervisor, so the framing is checked, not trusted:
anything that is not the supervisor's framing is a transport error, never a guess.
"""

from __future__ import annotations

import json

import pytest

from openblox.client.errors import ExecTransportError, OutputLimitExceeded
from openblox.client.supervised import _FrameDecoder, _supervisor_missing

VERDICT = {"exit_code": 0, "timed_out": False, "truncated": False, "signal": None}
MISSING = json.dumps(
    {
        "status": "Failure",
        "message": 'exec: "/usr/libexec/openblox/supervise": stat '
        "/usr/libexec/openblox/supervise: no such file or directory",
    }
).encode()


def frame(tag: bytes, payload: bytes) -> bytes:
    return tag + len(payload).to_bytes(4, "big") + payload


def test_output_and_verdict_come_apart_even_across_split_reads() -> None:
    decoder = _FrameDecoder(cap=100)
    raw = frame(b"S", b"") + frame(b"O", b"out") + frame(b"E", b"err")
    raw += frame(b"R", json.dumps(VERDICT).encode())
    chunks = [chunk for index in range(len(raw)) for chunk in decoder.feed(raw[index : index + 1])]
    assert [(c.stream, c.data) for c in chunks] == [("stdout", b"out"), ("stderr", b"err")]
    assert decoder.verdict == VERDICT


@pytest.mark.parametrize(
    "raw",
    [
        frame(b"X", b"anything"),
        b"O" + (1 << 30).to_bytes(4, "big"),
        frame(b"R", b"not json"),
        frame(b"R", b"[1, 2]"),
        frame(b"R", b'{"exit_code": "0"}'),
        frame(b"R", json.dumps(VERDICT | {"stalled": -1}).encode()),
        frame(b"R", json.dumps(VERDICT | {"stalled": True}).encode()),
        frame(b"R", json.dumps(VERDICT | {"stalled": "40"}).encode()),
        frame(b"R", json.dumps(VERDICT).replace("}", ', "stalled": NaN}').encode()),
    ],
    ids=[
        "unknown-tag",
        "huge-length",
        "bad-json",
        "not-an-object",
        "exit-code-not-int",
        "stalled-negative",
        "stalled-bool",
        "stalled-text",
        "stalled-nan",
    ],
)
def test_anything_but_the_supervisors_framing_is_a_transport_error(raw: bytes) -> None:
    with pytest.raises(ExecTransportError):
        list(_FrameDecoder(cap=100).feed(raw))


def test_the_cap_holds_on_the_client_side_too() -> None:
    """The supervisor cuts at the cap: output past it was forged into the stream, and the
    reading stops there with what came within the cap."""
    decoder = _FrameDecoder(cap=4)
    with pytest.raises(OutputLimitExceeded, match="went past 4 bytes") as raised:
        list(decoder.feed(frame(b"O", b"abc") + frame(b"O", b"def")))
    assert bytes(decoder.stdout) == b"abc"
    assert raised.value.limit == 4
    assert isinstance(raised.value, ExecTransportError)


def test_fallback_only_when_nothing_at_all_came_from_the_native_supervisor() -> None:
    assert _supervisor_missing(MISSING, _FrameDecoder(cap=10))
    started = _FrameDecoder(cap=10)
    list(started.feed(frame(b"S", b"")))
    # It ran (and its command may have): the same failure text must not run it again.
    assert not _supervisor_missing(MISSING, started)
    assert not _supervisor_missing(b"", _FrameDecoder(cap=10))
