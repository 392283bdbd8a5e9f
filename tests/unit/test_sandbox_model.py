from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from types import MappingProxyType
from typing import Any

import pytest

from openblox.models import (
    Sandbox,
    SandboxError,
    SandboxSpec,
    parse_sandbox,
)
from openblox.models.sandbox import plain
from openblox.timestamps import format_timestamp, parse_timestamp
from tests.unit.factories import CREATED, SANDBOX_UID, sandbox_body


def test_parses_a_sandbox_body() -> None:
    body = sandbox_body(
        spec={"idleTimeoutSeconds": 60, "maxAgeSeconds": 600},
        annotations={"openblox.sh/last-activity": "2025-01-02T03:10:00Z"},
        status={"conditions": [{"type": "Ready", "status": "True"}], "podName": "demo"},
    )
    body["metadata"]["deletionTimestamp"] = "2025-01-02T04:00:00Z"

    sandbox = parse_sandbox(body)

    assert sandbox.name == "demo"
    assert sandbox.namespace == "team-a"
    assert sandbox.uid == SANDBOX_UID
    assert sandbox.generation == 1
    assert sandbox.creation_timestamp == CREATED
    assert sandbox.spec == SandboxSpec("code-exec", idle_timeout_seconds=60, max_age_seconds=600)
    assert sandbox.labels == {"team": "a"}
    assert sandbox.last_activity == datetime(2025, 1, 2, 3, 10, tzinfo=UTC)
    assert sandbox.deletion_timestamp == datetime(2025, 1, 2, 4, 0, tzinfo=UTC)
    assert sandbox.status["podName"] == "demo"
    assert sandbox.conditions == [{"type": "Ready", "status": "True"}]


def test_optional_parts_default_to_absent() -> None:
    body = sandbox_body()
    del body["metadata"]["labels"], body["metadata"]["annotations"]

    sandbox = parse_sandbox(body)

    assert sandbox.spec == SandboxSpec("code-exec")
    assert sandbox.labels == {}
    assert sandbox.last_activity is None
    assert sandbox.deletion_timestamp is None
    assert sandbox.status == {}
    assert sandbox.conditions == []


def test_is_detached_from_and_cannot_change_the_body() -> None:
    body = sandbox_body(status={"conditions": [{"type": "Ready"}]})
    sandbox = parse_sandbox(body)

    body["metadata"]["labels"]["team"] = "b"
    body["status"]["conditions"].append({"type": "PodReady"})

    assert sandbox.labels == {"team": "a"}
    assert len(sandbox.conditions) == 1
    with pytest.raises(TypeError):
        sandbox.labels["team"] = "c"  # type: ignore[index]


def test_accepts_the_typed_clients_datetimes() -> None:
    body = sandbox_body()
    body["metadata"]["creationTimestamp"] = CREATED
    assert parse_sandbox(body).creation_timestamp == CREATED


@pytest.mark.parametrize(
    "annotation",
    ["", "yesterday", "2025-01-02", "2025-01-02T03:10:00", "2025-13-02T03:10:00Z", "1735787400"],
)
def test_an_unusable_activity_stamp_counts_as_no_activity(annotation: str) -> None:
    body = sandbox_body(annotations={"openblox.sh/last-activity": annotation})
    assert parse_sandbox(body).last_activity is None


def _drop(*path: str) -> Callable[[dict[str, Any]], None]:
    def mutate(body: dict[str, Any]) -> None:
        parent = body
        for key in path[:-1]:
            parent = parent[key]
        del parent[path[-1]]

    return mutate


def _set(value: object, *path: str) -> Callable[[dict[str, Any]], None]:
    def mutate(body: dict[str, Any]) -> None:
        parent = body
        for key in path[:-1]:
            parent = parent[key]
        parent[path[-1]] = value

    return mutate


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (_drop("metadata"), "Sandbox metadata must be an object"),
        (_drop("spec"), "Sandbox spec must be an object"),
        (_drop("metadata", "name"), "Sandbox metadata.name must be a non-empty string"),
        (
            _set("", "metadata", "namespace"),
            "Sandbox metadata.namespace must be a non-empty string",
        ),
        (_drop("metadata", "uid"), "Sandbox metadata.uid must be a non-empty string"),
        (_drop("metadata", "generation"), "Sandbox metadata.generation is missing"),
        (
            _set(True, "metadata", "generation"),
            "metadata.generation must be a positive integer",
        ),
        (_drop("metadata", "creationTimestamp"), "Sandbox metadata.creationTimestamp is missing"),
        (_set("soon", "metadata", "creationTimestamp"), "creationTimestamp must be an RFC 3339"),
        (
            _set(datetime(2025, 1, 1), "metadata", "creationTimestamp"),
            "creationTimestamp must be an RFC 3339",
        ),
        (_drop("spec", "profile"), "Sandbox spec.profile must be a non-empty string"),
        (_set(0, "spec", "maxAgeSeconds"), "spec.maxAgeSeconds must be a positive integer"),
        (
            _set("60", "spec", "idleTimeoutSeconds"),
            "spec.idleTimeoutSeconds must be a positive integer",
        ),
        (_set({"a": 1}, "metadata", "labels"), "metadata.labels must map strings to strings"),
        (_set([], "status"), "Sandbox status must be an object"),
    ],
)
def test_a_malformed_body_raises_sandbox_error(
    mutate: Callable[[dict[str, Any]], None], message: str
) -> None:
    body = sandbox_body()
    mutate(body)
    with pytest.raises(SandboxError, match=message):
        parse_sandbox(body)


class TestTimestamps:
    def test_parse_accepts_rfc3339_forms(self) -> None:
        expected = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
        assert parse_timestamp("2025-01-02T03:04:05Z") == expected
        assert parse_timestamp("2025-01-02t03:04:05z") == expected
        assert parse_timestamp("2025-01-02T05:04:05+02:00") == expected
        assert parse_timestamp("2025-01-02T03:04:05.123456789Z") == expected.replace(
            microsecond=123456
        )

    def test_format_is_utc_to_the_second(self) -> None:
        moment = datetime(2025, 1, 2, 5, 4, 5, 999999, tzinfo=timezone(timedelta(hours=2)))
        assert format_timestamp(moment) == "2025-01-02T03:04:05Z"

    def test_format_refuses_naive_datetimes(self) -> None:
        with pytest.raises(ValueError, match="naive"):
            format_timestamp(datetime(2025, 1, 2))

    def test_round_trip(self) -> None:
        assert parse_timestamp(format_timestamp(CREATED)) == CREATED


def test_sandbox_is_immutable() -> None:
    sandbox = Sandbox("n", "ns", "uid", 1, CREATED, SandboxSpec("p"))
    with pytest.raises(AttributeError):
        sandbox.name = "other"  # type: ignore[misc]


def test_plain_copies_any_mapping_and_sequence_into_plain_dicts_and_lists() -> None:
    """What the status comparison and the parsed Sandbox both rely on: a detached copy."""
    inner: dict[str, tuple[int, ...]] = {"b": (1, 2)}
    copy = plain({"a": MappingProxyType(inner)})
    assert copy == {"a": {"b": [1, 2]}}
    assert type(copy["a"]) is dict
    inner["b"] = (3,)
    assert copy["a"]["b"] == [1, 2]
