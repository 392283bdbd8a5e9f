"""`Runtime.build` makes each part once and hands the same one to everyone who needs it
(issue 35): built against a fake API server, no request is needed to check that."""

from __future__ import annotations

from typing import Any

import pytest

from openblox.controller import runtime
from openblox.controller.kube import Kube
from tests.unit.test_operator_loop import FakeKube


class _Unfenced(FakeKube):
    def guarded(self, fence: Any) -> _Unfenced:
        return self


def test_every_shared_part_is_one_object(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = _Unfenced()
    monkeypatch.setattr(Kube, "connect", staticmethod(lambda: kube))
    built = runtime.Runtime.build()
    reconciler, reaper, keeper = built.reconciler, built.reaper, built.pool_keeper
    assert reaper._deadlines is reconciler._deadlines
    assert reaper._requeue is reconciler._requeue
    assert reaper._resyncs is built.resyncs
    assert keeper._boundaries is reconciler._boundaries is built.boundaries
    assert keeper._namespaces is reconciler._namespaces
    assert keeper._runtimes is reconciler._runtimes
    assert reconciler._pods._claimer is not None
    # A change of the pools wakes the keeper, through the Event it was built with.
    built.pools._on_change()
    assert keeper._wake.is_set()
    assert kube.calls == []
