"""The operator's start-up gate (openblox.controller.support_gate): on an API server openblox
does not support it waits, says why once, keeps /healthz answering, and starts once the
server qualifies; a check it cannot make never holds it."""

from __future__ import annotations

import logging
import urllib.error
import urllib.request
from types import SimpleNamespace
from typing import Any, cast

import pytest

from openblox.controller import support_gate
from openblox.controller.kube import Kube, path
from openblox.controller.support_gate import (
    WAITING,
    Reporter,
    ServerReader,
    hold_while_unsupported,
    serving_health,
    wait_until_supported,
)
from openblox.models.cluster_support import ADMISSION_DISCOVERY_PATH, VERSION_PATH
from openblox.names import OPERATOR_NAMESPACE
from openblox.transport import NotFound, ServerError

SERVER = "https://10.96.0.1:443"
POD = "openblox-operator-5d8f-abcde"
SERVED = {
    "resources": [
        {"name": "validatingadmissionpolicies"},
        {"name": "validatingadmissionpolicybindings"},
    ]
}


def version(git_version: str) -> dict[str, Any]:
    return {"major": "1", "minor": "29", "gitVersion": git_version}


OLD = version("v1.29.4")
NEW = version("v1.37.2")


class FakeKube:
    """Answers /version from `versions` in turn (the last one stays), discovery with
    `discovery` (None: 404), the operator's Pod with `pod` (None: 404); records posts."""

    def __init__(
        self,
        versions: list[object],
        discovery: object = SERVED,
        pod: dict[str, Any] | None = None,
    ) -> None:
        self.versions = versions
        self.discovery = discovery
        self.pod = pod
        self.session = SimpleNamespace(server=SERVER)
        self.credentials = SimpleNamespace(namespace=OPERATOR_NAMESPACE)
        self.posted: list[tuple[str, dict[str, Any]]] = []

    def get(self, request_path: str, **_: Any) -> Any:
        if request_path == VERSION_PATH:
            answer = self.versions.pop(0) if len(self.versions) > 1 else self.versions[0]
            if isinstance(answer, BaseException):
                raise answer
            return answer
        if request_path == ADMISSION_DISCOVERY_PATH:
            if self.discovery is None:
                raise NotFound(404, "Not Found")
            return self.discovery
        if request_path == path(plural="pods", namespace=OPERATOR_NAMESPACE, name=POD):
            if self.pod is None:
                raise NotFound(404, "Not Found")
            return self.pod
        raise AssertionError(f"unexpected GET {request_path}")

    def post(self, request_path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.posted.append((request_path, body))
        return body


def reader(kube: FakeKube) -> ServerReader:
    return ServerReader(cast(Kube, kube))


# ------------------------------------------------------------------ the verdict


def test_a_supported_server_lets_the_operator_start() -> None:
    assert reader(FakeKube([NEW])).verdict() is None


def test_an_older_server_holds_it_with_the_minimum_and_what_it_does() -> None:
    message = reader(FakeKube([OLD])).verdict()
    assert message == (
        "openblox needs Kubernetes 1.30 or newer (ValidatingAdmissionPolicy "
        "admissionregistration.k8s.io/v1, exec over WebSocket v5); the API server at "
        f"{SERVER} is v1.29.4; {WAITING}"
    )
    assert WAITING == "the operator waits, and checks again every 60 s"


def test_a_server_that_does_not_serve_the_admission_api_holds_it() -> None:
    message = reader(FakeKube([NEW], discovery=None)).verdict()
    assert message is not None
    assert "does not serve admissionregistration.k8s.io/v1 at all" in message


@pytest.mark.parametrize(
    "failure",
    [
        OSError("connection refused"),
        TimeoutError("timed out"),
        ServerError(503, "Service Unavailable"),
        ValueError("not JSON"),
    ],
)
def test_a_check_that_cannot_be_made_never_holds_it(
    failure: BaseException, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        assert reader(FakeKube([failure])).verdict() is None
    assert "could not check the API server's version, starting anyway" in caplog.text


def test_an_unreadable_version_is_warned_once_and_does_not_hold(
    caplog: pytest.LogCaptureFixture,
) -> None:
    check = reader(FakeKube([version("garbage")]))
    with caplog.at_level(logging.WARNING):
        assert check.verdict() is None
        assert check.verdict() is None
    assert caplog.text.count("gives no version openblox can read") == 1


# ------------------------------------------------------------------ the wait


def test_the_wait_reports_each_look_and_ends_once_the_server_qualifies() -> None:
    verdicts = iter(["still old", None, "never asked"])
    reported: list[str] = []
    slept: list[float] = []
    refused = hold_while_unsupported("old", lambda: next(verdicts), reported.append, slept.append)
    assert refused == 2
    assert reported == ["old", "still old"]
    assert slept == [60.0, 60.0]


def test_the_reporter_logs_once_and_records_one_event_on_the_operators_pod(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pod = {"metadata": {"name": POD, "namespace": OPERATOR_NAMESPACE, "uid": "u-1"}}
    kube = FakeKube([OLD], pod=pod)
    report = Reporter(cast(Kube, kube), POD)
    with caplog.at_level(logging.ERROR):
        for _ in range(3):
            report("too old")
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR] == ["too old"]
    [(where, event)] = kube.posted
    assert where == path(plural="events", namespace=OPERATOR_NAMESPACE)
    assert event["reason"] == "UnsupportedKubernetes"
    assert event["type"] == "Warning"
    assert event["message"] == "too old"
    assert event["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": POD,
        "namespace": OPERATOR_NAMESPACE,
        "uid": "u-1",
        "resourceVersion": None,
    }


def test_a_new_reason_is_a_new_event() -> None:
    kube = FakeKube([OLD], pod={"metadata": {"name": POD, "namespace": OPERATOR_NAMESPACE}})
    report = Reporter(cast(Kube, kube), POD)
    report("first")
    report("second")
    assert [event["message"] for _, event in kube.posted] == ["first", "second"]


def test_a_pod_that_cannot_be_read_still_gets_the_event_by_name() -> None:
    kube = FakeKube([OLD], pod=None)
    Reporter(cast(Kube, kube), POD)("too old")
    [(_, event)] = kube.posted
    assert event["involvedObject"]["name"] == POD
    assert event["involvedObject"]["namespace"] == OPERATOR_NAMESPACE
    assert event["involvedObject"]["uid"] is None


# ------------------------------------------------------------------ /healthz meanwhile


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code


def test_healthz_answers_while_waiting_and_the_port_is_freed_after() -> None:
    with serving_health("http://127.0.0.1:0/healthz") as server:
        port = server.server_address[1]
        assert _status(f"http://127.0.0.1:{port}/healthz") == 200
        assert _status(f"http://127.0.0.1:{port}/other") == 404
    with pytest.raises(urllib.error.URLError):
        _status(f"http://127.0.0.1:{port}/healthz")


def test_the_gate_waits_on_an_old_server_and_returns_once_it_is_upgraded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kube = FakeKube([OLD, OLD, NEW], pod={"metadata": {"name": POD, "uid": "u-2"}})
    monkeypatch.setattr(Kube, "connect", classmethod(lambda cls: kube))
    monkeypatch.setattr(support_gate, "RECHECK_SECONDS", 0.01)
    monkeypatch.setenv("POD_NAME", POD)
    wait_until_supported("http://127.0.0.1:0/healthz")
    assert [event["reason"] for _, event in kube.posted] == ["UnsupportedKubernetes"]
    assert kube.versions == [NEW]


def test_the_gate_does_nothing_on_a_supported_server(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = FakeKube([NEW])
    monkeypatch.setattr(Kube, "connect", classmethod(lambda cls: kube))

    def no_health_server(endpoint: str) -> None:
        raise AssertionError("kopf serves /healthz itself")

    monkeypatch.setattr(support_gate, "serving_health", no_health_server)
    wait_until_supported("http://127.0.0.1:0/healthz")
    assert kube.posted == []
