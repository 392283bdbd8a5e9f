"""The async client offers every call of the sync one, with the same parameters.

A call added to `Client`, `Sandbox`, `Files` or `ExecStream` without its async twin fails
here, so the claim "the same surface" in the README cannot drift.
"""

from __future__ import annotations

import inspect

import pytest

from openblox.client import AsyncClient, AsyncExecStream, AsyncSandbox, Client, Sandbox
from openblox.client.async_client import AsyncFiles
from openblox.client.files import Files
from openblox.client.supervised import ExecStream

PAIRS = [
    (Client, AsyncClient),
    (Sandbox, AsyncSandbox),
    (Files, AsyncFiles),
    (ExecStream, AsyncExecStream),
]

# The sync context-manager and iterator protocols have async twins of other names.
PROTOCOL_TWINS = {
    "__enter__": "__aenter__",
    "__exit__": "__aexit__",
    "__iter__": "__aiter__",
}


def _public(cls: type) -> dict[str, object]:
    return {
        name: member
        for name, member in vars(cls).items()
        if not name.startswith("_") or name in PROTOCOL_TWINS
    }


def _parameters(member: object) -> list[tuple[str, object, object]]:
    if isinstance(member, property):
        return []
    signature = inspect.signature(member)  # type: ignore[arg-type]
    return [
        (name, parameter.kind, parameter.default)
        for name, parameter in signature.parameters.items()
        if name not in {"self", "_"}
    ]


@pytest.mark.parametrize(("sync", "async_"), PAIRS, ids=[a.__name__ for _, a in PAIRS])
def test_every_sync_call_has_an_async_twin_with_the_same_parameters(
    sync: type, async_: type
) -> None:
    twins = vars(async_)
    for name, member in _public(sync).items():
        twin_name = PROTOCOL_TWINS.get(name, name)
        assert twin_name in twins, f"{async_.__name__} lacks {twin_name} (sync: {name})"
        if name in PROTOCOL_TWINS:
            continue
        twin = twins[twin_name]
        assert isinstance(twin, property) == isinstance(member, property), name
        assert _parameters(twin) == _parameters(member), f"{async_.__name__}.{name}"


@pytest.mark.parametrize(("sync", "async_"), PAIRS, ids=[a.__name__ for _, a in PAIRS])
def test_async_twins_of_calls_that_wait_are_coroutines(sync: type, async_: type) -> None:
    for name, member in _public(sync).items():
        if name.startswith("_") or isinstance(member, property):
            continue
        assert inspect.iscoroutinefunction(getattr(async_, name)), f"{async_.__name__}.{name}"


def test_the_async_client_is_built_with_the_same_arguments() -> None:
    assert _parameters(AsyncClient.__init__) == _parameters(Client.__init__)
