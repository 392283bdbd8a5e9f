"""The fuzzers' judge must be able to fail: each way of weakening a pod is caught, and
the shipped pod passes."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from openblox.builders import build_pod
from tests.fuzz.oracle import Violation, clear, weaknesses
from tests.unit.factories import CREATED, default_profile, make_sandbox

PROFILE = default_profile()


def _pod() -> dict[str, Any]:
    return build_pod(make_sandbox(), PROFILE, now=CREATED)


def _container(pod: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = pod["spec"]["containers"][0]
    return container


def _unconfined(pod: dict[str, Any]) -> None:
    _container(pod)["securityContext"].update(seccompProfile={"type": "Unconfined"})
    pod["spec"]["securityContext"].pop("seccompProfile")


MUTATIONS: dict[str, Callable[[dict[str, Any]], None]] = {
    "runc": lambda p: p["spec"].update(runtimeClassName="runc"),
    "no runtime class": lambda p: p["spec"].pop("runtimeClassName"),
    "host network": lambda p: p["spec"].update(hostNetwork=True),
    "host pid": lambda p: p["spec"].update(hostPID=True),
    "token mounted": lambda p: p["spec"].update(automountServiceAccountToken=True),
    "service links": lambda p: p["spec"].pop("enableServiceLinks"),
    "longer deadline": lambda p: p["spec"].update(activeDeadlineSeconds=10**6),
    "no deadline": lambda p: p["spec"].pop("activeDeadlineSeconds"),
    "root": lambda p: p["spec"]["securityContext"].update(runAsUser=0),
    "other image": lambda p: _container(p).update(image="evil"),
    "privileged": lambda p: _container(p)["securityContext"].update(privileged=True),
    "escalation": lambda p: _container(p)["securityContext"].pop("allowPrivilegeEscalation"),
    "writable root": lambda p: _container(p)["securityContext"].update(
        readOnlyRootFilesystem=False
    ),
    "a capability": lambda p: _container(p)["securityContext"]["capabilities"].update(
        add=["SYS_ADMIN"]
    ),
    "unconfined": _unconfined,
    "more cpu": lambda p: _container(p)["resources"]["limits"].update(cpu="64"),
    "no memory limit": lambda p: _container(p)["resources"]["limits"].pop("memory"),
    "disk scratch": lambda p: p["spec"]["volumes"][0]["emptyDir"].pop("medium"),
    "bigger scratch": lambda p: p["spec"]["volumes"][0]["emptyDir"].update(sizeLimit="1Ti"),
    "host path": lambda p: p["spec"]["volumes"].append({"name": "h", "hostPath": {"path": "/"}}),
    "second container": lambda p: p["spec"]["containers"].append(copy.deepcopy(_container(p))),
    "published port": lambda p: _container(p).update(ports=[{"containerPort": 80}]),
    "unlabelled": lambda p: p["metadata"]["labels"].clear(),
}


def test_the_built_pod_is_not_weaker_than_its_profile() -> None:
    assert weaknesses(_pod(), PROFILE) == []


@pytest.mark.parametrize("name", MUTATIONS)
def test_each_weakening_is_caught(name: str) -> None:
    pod = _pod()
    MUTATIONS[name](pod)
    assert weaknesses(pod, PROFILE) != []


@pytest.mark.parametrize(
    "message",
    ["", "Traceback (most recent call last):\n ...", "<Foo object at 0x7f>", "x" * 5000],
)
def test_an_unclear_message_is_a_violation(message: str) -> None:
    with pytest.raises(Violation):
        clear(message)


def test_a_clear_message_passes_and_must_name_what_it_should() -> None:
    clear('profile "x" is invalid: user must be between 1 and 2147483647, got 0')
    with pytest.raises(Violation):
        clear("something is wrong", must_mention='profile "x"')


@pytest.mark.parametrize(
    "message",
    [
        'Sandbox.openblox.sh "a" is invalid: <nil>: Invalid value: "object": Sandbox names '
        "must be at most 63 characters (they label the pod)",
        'Sandbox.openblox.sh "" is invalid: [metadata.name: Required value: name or '
        "generateName is required, <nil>: Invalid value: null: some validation rules were "
        "not checked because the object was invalid]",
    ],
)
def test_the_api_servers_root_field_path_is_not_an_artefact(message: str) -> None:
    clear(message)


def test_a_nil_anywhere_else_is_still_unclear() -> None:
    with pytest.raises(Violation):
        clear('Sandbox "a" is invalid: spec.profile: Invalid value: <nil>')
