"""The two clients offer the same calls, with the same parameters, both ways round, and each
call that talks to the cluster is one plan that both shells drive (ADR 0017).

A call added to `Client`, `Sandbox`, `Files` or `ExecStream` without its async twin fails
here, and so does one added to an async class alone, so the claim "the same surface" in
the README cannot drift in either direction.
"""

from __future__ import annotations

import inspect

import pytest

from openblox.client import AsyncClient, AsyncExecStream, AsyncSandbox, Client, Sandbox
from openblox.client.async_client import AsyncFiles
from openblox.client.sync_client import ExecStream, Files

PAIRS = [
    (Client, AsyncClient),
    (Sandbox, AsyncSandbox),
    (Files, AsyncFiles),
    (ExecStream, AsyncExecStream),
]
IDS = [sync.__name__ for sync, _ in PAIRS]

# The sync context-manager and iterator protocols have async twins of other names.
PROTOCOL_TWINS = {
    "__enter__": "__aenter__",
    "__exit__": "__aexit__",
    "__iter__": "__aiter__",
}
ASYNC_PROTOCOLS = {twin: name for name, twin in PROTOCOL_TWINS.items()}
# Only the async client holds connections a caller must close before its loop ends (one
# aiohttp session per loop); the blocking one keeps one per thread, closed with it.
ASYNC_ONLY: dict[type, set[str]] = {AsyncClient: {"aclose", "__aenter__", "__aexit__"}}


def _public(cls: type, protocols: dict[str, str]) -> dict[str, object]:
    """Every public member of `cls`, its own or inherited (not from `object`), unbound."""
    return {
        name: inspect.getattr_static(cls, name)
        for name in dir(cls)
        if (not name.startswith("_") or name in protocols) and not hasattr(object, name)
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


@pytest.mark.parametrize(("sync", "async_"), PAIRS, ids=IDS)
def test_every_sync_call_has_an_async_twin_with_the_same_parameters(
    sync: type, async_: type
) -> None:
    twins = _public(async_, ASYNC_PROTOCOLS)
    for name, member in _public(sync, PROTOCOL_TWINS).items():
        twin_name = PROTOCOL_TWINS.get(name, name)
        assert twin_name in twins, f"{async_.__name__} lacks {twin_name} (sync: {name})"
        if name in PROTOCOL_TWINS:
            continue
        twin = twins[twin_name]
        assert isinstance(twin, property) == isinstance(member, property), name
        assert _parameters(twin) == _parameters(member), f"{async_.__name__}.{name}"


@pytest.mark.parametrize(("sync", "async_"), PAIRS, ids=IDS)
def test_every_async_call_has_a_sync_twin_with_the_same_parameters(
    sync: type, async_: type
) -> None:
    twins = _public(sync, PROTOCOL_TWINS)
    for name, member in _public(async_, ASYNC_PROTOCOLS).items():
        if name in ASYNC_ONLY.get(async_, set()):
            continue
        twin_name = ASYNC_PROTOCOLS.get(name, name)
        assert twin_name in twins, f"{sync.__name__} lacks {twin_name} (async: {name})"
        if name in ASYNC_PROTOCOLS:
            continue
        twin = twins[twin_name]
        assert isinstance(twin, property) == isinstance(member, property), name
        assert _parameters(twin) == _parameters(member), f"{sync.__name__}.{name}"


@pytest.mark.parametrize(("sync", "async_"), PAIRS, ids=IDS)
def test_async_twins_of_calls_that_wait_are_coroutines(sync: type, async_: type) -> None:
    for name, member in _public(sync, {}).items():
        if isinstance(member, property):
            continue
        assert not inspect.iscoroutinefunction(member), f"{sync.__name__}.{name}"
        assert inspect.iscoroutinefunction(getattr(async_, name)), f"{async_.__name__}.{name}"


@pytest.mark.parametrize(("sync", "async_"), PAIRS, ids=IDS)
def test_each_call_of_both_clients_is_the_same_plan(sync: type, async_: type) -> None:
    """What a call decides is written once: a shell's method made of a plan is made of the
    same plan in the other shell. A call written out by hand in a shell is named here."""
    written_out = {"refresh"}  # returns the handle itself, which no plan knows
    for name, member in _public(sync, {}).items():
        if isinstance(member, property) or name in written_out:
            continue
        plan = getattr(member, "__wrapped__", None)
        assert plan is not None, f"{sync.__name__}.{name} is not made of a plan"
        twin = getattr(getattr(async_, name), "__wrapped__", None)
        assert twin is plan, f"{async_.__name__}.{name} is not made of the same plan"


def test_both_sandboxes_can_write_and_read_a_file_directly() -> None:
    for handle in (Sandbox, AsyncSandbox):
        assert {"write_file", "read_file"} <= set(_public(handle, {}))


def test_the_two_clients_are_built_with_the_same_arguments() -> None:
    assert _parameters(AsyncClient.__init__) == _parameters(Client.__init__)


def test_the_checker_sees_a_call_missing_on_either_side() -> None:
    class Sync:
        def ping(self, x: int) -> None: ...

    class Async:
        async def ping(self, x: int) -> None: ...

        async def extra(self) -> None: ...

    assert set(_public(Async, ASYNC_PROTOCOLS)) - set(_public(Sync, PROTOCOL_TWINS)) == {"extra"}
