"""The client's requests to the API server, as plans (`effects`): Sandbox objects, their
pods and Events, ConfigMaps and Secrets, and exec streams.

Everything goes through the API server. Sandbox pods have no network, so nothing here
reaches a pod directly. Errors leave as the client's own types where the client has one.
"""

from __future__ import annotations

import builtins
import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

from openblox.client.effects import Frames, Next, OpenExec, Plan, Probe, closing
from openblox.client.errors import ExecTransportError, SandboxGone
from openblox.client.postmortem import denial_records
from openblox.denials import Denial
from openblox.names import GROUP, OPERATOR_NAMESPACE, PLURAL, VERSION, Reason
from openblox.transport.errors import ExecStreamError, NotFound
from openblox.transport.frames import ExecOutput
from openblox.transport.rest import MERGE_PATCH, Call, path

SYSTEM_NAMESPACE = OPERATOR_NAMESPACE


def sandboxes_path(namespace: str, name: str | None = None) -> str:
    return path(group=GROUP, version=VERSION, plural=PLURAL, namespace=namespace, name=name)


def pod_path(namespace: str, pod: str) -> str:
    return path(plural="pods", namespace=namespace, name=pod)


# ------------------------------------------------------------------ Sandbox objects


def create_sandbox(body: Mapping[str, Any]) -> Plan[dict[str, Any]]:
    """POST the Sandbox; a refusal is the transport's typed error."""
    where = sandboxes_path(body["metadata"]["namespace"])
    created: dict[str, Any] = yield Call("POST", where, body)
    return created


def read_sandbox(namespace: str, name: str) -> Plan[dict[str, Any] | None]:
    """The Sandbox as the API serves it, or None if it does not exist."""
    return (yield from _read(sandboxes_path(namespace, name)))


def list_sandboxes(namespace: str) -> Plan[builtins.list[dict[str, Any]]]:
    listed = yield Call("GET", sandboxes_path(namespace))
    items: builtins.list[dict[str, Any]] = listed.get("items") or []
    return items


def delete_sandbox(namespace: str, name: str) -> Plan[None]:
    """Delete it; one already gone is no error."""
    with contextlib.suppress(NotFound):
        yield Call("DELETE", sandboxes_path(namespace, name))


def touch(namespace: str, name: str, annotation: str, stamp: str) -> Plan[None]:
    patch = {"metadata": {"annotations": {annotation: stamp}}}
    with contextlib.suppress(NotFound):
        yield Call("PATCH", sandboxes_path(namespace, name), patch, content_type=MERGE_PATCH)


# ------------------------------------------------------------------ pods, Events, config


def read_pod(namespace: str, pod: str, *, unreachable: bool = False) -> Plan[dict[str, Any] | None]:
    """The pod as the API serves it, or None if it does not exist. With `unreachable`, an
    API server that cannot be reached is raised as `effects.Unreachable`."""
    return (yield from _read(pod_path(namespace, pod), unreachable=unreachable))


def recorded_denials(namespace: str, uid: str) -> Plan[builtins.list[Denial]]:
    """The denial records of the `Denied` Events the operator wrote on the Sandbox `uid`."""
    selector = f"involvedObject.uid={uid},reason={Reason.DENIED}"
    events = yield Call(
        "GET", path(plural="events", namespace=namespace), params={"fieldSelector": selector}
    )
    return denial_records(events.get("items") or [])


def read_config_map(name: str, namespace: str = SYSTEM_NAMESPACE) -> Plan[dict[str, str]]:
    body = yield Call("GET", path(plural="configmaps", namespace=namespace, name=name))
    return dict(body.get("data") or {})


def read_secret(name: str, namespace: str = SYSTEM_NAMESPACE) -> Plan[dict[str, str]]:
    body = yield Call("GET", path(plural="secrets", namespace=namespace, name=name))
    return dict(body.get("data") or {})


def _read(request_path: str, *, unreachable: bool = False) -> Plan[dict[str, Any] | None]:
    call = Call("GET", request_path)
    try:
        found: dict[str, Any] = yield (Probe(call) if unreachable else call)
    except NotFound:
        return None
    return found


# ------------------------------------------------------------------ exec


def open_exec(
    namespace: str, pod: str, argv: Sequence[str], *, stdin: bool, timeout: float
) -> Plan[object]:
    """An exec stream in the pod's sandbox container. A pod that is gone or being deleted
    is `SandboxGone`; any other refusal or failure to connect, `ExecTransportError` with
    the status."""
    try:
        socket: object = yield OpenExec(namespace, pod, tuple(argv), stdin, timeout)
    except ExecStreamError as error:
        if error.status_code == 404:
            raise SandboxGone(f"sandbox pod {namespace}/{pod} does not exist") from error
        if error.status_code is not None:
            # A pod being deleted may refuse with the runtime's own words (containerd 2:
            # 500 "container not found") before the API server forgets it: ask the API.
            body = yield from read_pod(namespace, pod)
            if body is None or _ending(body):
                state = "does not exist" if body is None else "is being deleted"
                raise SandboxGone(f"sandbox pod {namespace}/{pod} {state} ({error})") from error
        raise ExecTransportError(str(error), error.status_code) from error
    return socket


def _ending(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def read_to_end(socket: object, deadline: float, output: ExecOutput) -> Plan[None]:
    """Every frame until the stream ends, fed to `output`; then the socket is closed. It
    raises as the frames do (TimeoutError, ExecStreamError, ExecOutputTooLarge), and what
    arrived until then stays in `output`."""
    yield from closing(socket, _feed_all(socket, deadline, output))


def _feed_all(socket: object, deadline: float, output: ExecOutput) -> Plan[None]:
    frames = yield Frames(socket, deadline)
    while (frame := (yield Next(frames))) is not None:
        output.feed(frame)
