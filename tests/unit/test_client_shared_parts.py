"""The pure parts the blocking and the asyncio Sandbox handles share (so they cannot drift)."""

from __future__ import annotations

import base64
import json
import logging
from datetime import UTC, datetime

import pytest

from openblox.client.background import control_errors, control_failure, control_output
from openblox.client.errors import ExecTransportError, ProcessNotFound
from openblox.client.postmortem import denial_records
from openblox.client.preview import PreviewUnavailable, expiry, key_ring, signed_url
from openblox.denials import Denial
from openblox.preview.tokens import Grant, verify
from openblox.transport import ERROR, STDERR, STDOUT, ExecOutput, ExecStreamError, Frame

KEY = b"k" * 32


def test_denial_records_keep_only_denials_from_event_messages(
    caplog: pytest.LogCaptureFixture,
) -> None:
    at = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
    denial = Denial("memory", "use more memory", "memory=512Mi", "p", at, "OOMKilled", False)
    events = [
        {"message": json.dumps(denial.to_dict())},
        {"message": "Created pod"},
        {"message": json.dumps({"reason": "not a denial"})},
        {"message": json.dumps({**denial.to_dict(), "denied": "weather"})},
        {},
    ]
    with caplog.at_level(logging.WARNING, logger="openblox.client.postmortem"):
        records = denial_records(events)
    assert records == [denial]
    assert all(isinstance(record, Denial) for record in records)
    # A JSON message that is no record is skipped with a line that says why, not a crash.
    assert caplog.text.count("a Denied Event") == 2
    assert "'weather'" in caplog.text


def test_control_failures_are_typed_from_the_exit_code() -> None:
    assert control_failure("ps", 0, b"") is None
    missing = control_failure("stop", 3, b"no process named web\n")
    assert isinstance(missing, ProcessNotFound)
    assert str(missing) == "no process named web"
    broken = control_failure("start", 1, bytearray(b"boom"))
    assert isinstance(broken, ExecTransportError)
    assert str(broken) == "start failed (exit 1): boom"
    assert isinstance(control_failure("ps", None, b""), ExecTransportError)


def _control_output(*frames: Frame) -> ExecOutput:
    output = ExecOutput()
    for frame in frames:
        output.feed(frame)
    return output


def test_a_control_modes_output_is_its_stdout_or_the_error_its_exit_code_means() -> None:
    done = _control_output(Frame(STDOUT, b"[]"), Frame(ERROR, b'{"status": "Success"}'))
    assert control_output("ps", done) == b"[]"
    exit_3 = (
        b'{"status": "Failure", "details": {"causes": [{"reason": "ExitCode", "message": "3"}]}}'
    )
    missing = _control_output(Frame(STDERR, b"no process named web"), Frame(ERROR, exit_3))
    with pytest.raises(ProcessNotFound, match="no process named web"):
        control_output("stop", missing)
    with pytest.raises(ExecTransportError, match="exit None"):
        control_output("ps", _control_output(Frame(STDOUT, b"cut off")))


def test_a_control_modes_broken_stream_is_the_clients_error() -> None:
    timed_out = pytest.raises(ExecTransportError, match="ps did not answer within 30s")
    with timed_out, control_errors("ps", 30.0):
        raise TimeoutError
    broke = pytest.raises(ExecTransportError, match="exec stream broke")
    with broke as raised, control_errors("ps", 30.0):
        raise ExecStreamError("exec stream broke: reset", 502)
    assert raised.value.status_code == 502


def test_a_signed_url_carries_a_grant_the_proxy_verifies() -> None:
    data = {
        "current": base64.b64encode(b"k1").decode(),
        "k1": base64.b64encode(KEY).decode(),
    }
    grant = Grant("ns", "box", "uid-1", 8000, expiry(600, now=1_000_000))
    url = signed_url(grant, key_ring(data), "http://proxy.example/")
    assert url.startswith("http://proxy.example/p/") and url.endswith("/")
    token = url.removeprefix("http://proxy.example/p/").rstrip("/")
    assert verify(token, {"k1": KEY}, now=1_000_100) == grant


def test_a_secret_without_a_current_key_is_refused_clearly() -> None:
    with pytest.raises(PreviewUnavailable, match="not usable"):
        key_ring({"k1": base64.b64encode(KEY).decode()})
