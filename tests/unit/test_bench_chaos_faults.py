"""A fault's check is asked until it passes, and a check that hangs or raises cannot stall
or end the chaos run. No cluster: the checks here are plain functions."""

import threading
import time

import pytest
from bench import chaos_faults
from bench.chaos_faults import wait_healthy


def test_a_check_that_passes_on_a_later_try_gives_the_time_until_then() -> None:
    answers = iter([False, False, True])

    took = wait_healthy(lambda: next(answers), 10)

    assert took is not None and 1.5 < took < 5


def test_a_check_that_raises_is_not_passed_and_is_asked_again() -> None:
    calls = []

    def check() -> bool:
        calls.append(1)
        if len(calls) < 2:
            raise ConnectionRefusedError("the API server is restarting")
        return True

    assert wait_healthy(check, 10) is not None
    assert len(calls) == 2


def test_a_check_that_hangs_is_given_up_on_within_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(chaos_faults, "CHECK_SECONDS", 0.5)
    release = threading.Event()
    started = time.monotonic()

    assert wait_healthy(lambda: release.wait(60), 2) is None
    assert time.monotonic() - started < 4
    release.set()
