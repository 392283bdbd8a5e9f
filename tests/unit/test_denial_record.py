"""The typed denial record at its edges: parsed strictly where it comes in (a status, an
Event message), written as the documented JSON where it goes out (the command's `--json`)."""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from openblox.cli.main import _emit_exec, _fail
from openblox.client import ExecResult
from openblox.denials import SCHEMA, Denial, InvalidDenial

NOW = datetime(2026, 12, 1, 12, 0, 0, 123456, tzinfo=UTC)
NETWORK = Denial(
    denied="network",
    attempted="10.96.0.1:443",
    because="egress=none",
    profile="code-exec",
    at=NOW,
    evidence="OSError: [Errno 101] Network is unreachable",
    inferred=True,
)
WIRE: dict[str, Any] = {
    "schema": SCHEMA,
    "denied": "network",
    "attempted": "10.96.0.1:443",
    "because": "egress=none",
    "profile": "code-exec",
    "at": "2026-12-01T12:00:00Z",
    "evidence": "OSError: [Errno 101] Network is unreachable",
    "inferred": True,
}


def test_the_wire_record_parses_back_to_an_equal_denial() -> None:
    assert NETWORK.to_dict() == WIRE
    parsed = Denial.from_dict(WIRE)
    assert parsed == NETWORK and parsed.to_dict() == WIRE
    assert hash(parsed) == hash(NETWORK)
    assert parsed.at == datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


def test_the_fields_read_as_the_record_sent() -> None:
    """Bounded, whitespace folded and to the second once, so no field disagrees with the
    record: what a caller reads from `denial.because` is what the Event said."""
    long = Denial("time", "run  longer\nthan 60s", "b" * 400, "p", NOW, "e" * 400, False)
    assert long.attempted == "run longer than 60s"
    assert len(long.because) == 300 and long.because == long.to_dict()["because"]
    assert len(long.evidence) == 300
    assert long.at.microsecond == 0
    east = datetime(2026, 12, 1, 13, 0, 0, tzinfo=timezone(timedelta(hours=1)))
    assert Denial("time", "a", "b", "p", east, "", False).at == NOW.replace(microsecond=0)
    with pytest.raises(ValueError, match="naive"):
        Denial("time", "a", "b", "p", datetime(2026, 12, 1), "", False)


def _equal(left: object, right: object) -> bool:
    return left == right


def test_a_denial_is_read_by_its_fields_and_equals_only_a_denial() -> None:
    """One way to read a record in Python: its attributes. The wire dict is `to_dict()`;
    the Denial itself is no mapping, and no dict equals it."""
    assert (NETWORK.denied, NETWORK.at) == ("network", NOW.replace(microsecond=0))
    assert not isinstance(NETWORK, Mapping)
    assert not _equal(NETWORK, WIRE) and not _equal(WIRE, NETWORK)
    assert replace(NETWORK, inferred=False) != NETWORK
    assert {NETWORK, Denial.from_dict(WIRE)} == {NETWORK}


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"denied": "weather"}, "denied is 'weather'"),
        ({"denied": None}, "denied is None"),
        ({"schema": "openblox.sh/denial/v2"}, "schema is 'openblox.sh/denial/v2'"),
        ({"attempted": 443}, "attempted is a int, not a string"),
        ({"attempted": ""}, "attempted has 0 characters"),
        ({"because": "x" * 301}, "because has 301 characters"),
        ({"evidence": "x" * 301}, "evidence has 301 characters"),
        ({"profile": ["code-exec"]}, "profile is a list"),
        ({"at": "yesterday"}, "at is 'yesterday'"),
        ({"at": "2026-12-01T12:00:00.5Z"}, "not an RFC 3339 UTC time to the second"),
        ({"at": "2026-12-01T13:00:00+01:00"}, "not an RFC 3339 UTC time to the second"),
        ({"at": 1764590400}, "at is 1764590400"),
        ({"inferred": "yes"}, "inferred is 'yes', not a boolean"),
        ({"inferred": 1}, "inferred is 1, not a boolean"),
        ({"extra": 1}, "has no field extra"),
    ],
)
def test_a_bad_field_is_refused_by_name(change: dict[str, Any], says: str) -> None:
    with pytest.raises(InvalidDenial, match=re.escape(says)):
        Denial.from_dict({**WIRE, **change})


def test_missing_fields_and_non_objects_are_refused() -> None:
    partial = {key: value for key, value in WIRE.items() if key not in ("at", "inferred")}
    with pytest.raises(InvalidDenial, match="needs at, inferred"):
        Denial.from_dict(partial)
    for not_a_record in (None, "network", ["network"], 7):
        with pytest.raises(InvalidDenial, match="is a JSON object"):
            Denial.from_dict(not_a_record)
    # A ValueError, so a caller that guarded the old dict parsing still catches it.
    assert issubclass(InvalidDenial, ValueError)


def _result(*denials: Denial) -> ExecResult:
    return ExecResult(b"out", b"err", 1, False, False, 0.123456, denials)


def test_the_commands_json_output_holds_the_records_as_json(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert _emit_exec(_result(NETWORK), as_json=True) == 1
    printed = json.loads(capsys.readouterr().out)
    assert printed["denials"] == [WIRE]
    assert printed["stdout"] == "out" and printed["duration"] == 0.1235


def test_the_commands_text_output_names_each_denial(capsys: pytest.CaptureFixture[str]) -> None:
    _emit_exec(_result(NETWORK), as_json=False)
    assert "openblox: denied network: 10.96.0.1:443 (egress=none)" in capsys.readouterr().err


def test_a_typed_errors_record_is_the_commands_denial(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        _fail(argparse.Namespace(json=True), "SandboxGone", "gone", NETWORK)
    assert json.loads(capsys.readouterr().out) == {
        "error": "SandboxGone",
        "message": "gone",
        "denial": WIRE,
    }
    with pytest.raises(SystemExit):
        _fail(argparse.Namespace(json=True), "ApiError", "no")
    assert json.loads(capsys.readouterr().out)["denial"] is None
