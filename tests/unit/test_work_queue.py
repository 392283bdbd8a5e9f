"""The reconcile work queue: each key waits once, runs alone, and misses no change."""

from __future__ import annotations

import threading
import time

from openblox.controller.work_queue import WorkQueue, work


def test_a_key_asked_for_many_times_waits_once_with_its_first_trigger() -> None:
    queue = WorkQueue()
    for trigger in ("sandbox", "pod", "pod", "started"):
        queue.add(("team-a", "one"), trigger)
    queue.add(("team-a", "two"), "pod")
    assert len(queue) == 2
    assert queue.take(0) == (("team-a", "one"), "sandbox")
    assert queue.take(0) == (("team-a", "two"), "pod")
    assert queue.take(0) is None


def test_a_running_key_is_not_handed_to_a_second_worker_but_runs_again_after() -> None:
    queue = WorkQueue()
    queue.add(("ns", "a"), "sandbox")
    assert queue.take(0) == (("ns", "a"), "sandbox")
    queue.add(("ns", "a"), "pod")  # a change while its reconcile runs
    assert queue.take(0) is None  # not to a second worker meanwhile
    queue.done(("ns", "a"))
    assert queue.take(0) == (("ns", "a"), "pod")  # and not missed
    queue.done(("ns", "a"))
    assert queue.take(0) is None


def test_keys_are_taken_in_the_order_they_were_first_asked_for() -> None:
    queue = WorkQueue()
    for name in ("c", "a", "b", "a"):
        queue.add(("ns", name), "sandbox")
    assert [queue.take(0)[0][1] for _ in range(3)] == ["c", "a", "b"]  # type: ignore[index]


def test_workers_reconcile_every_key_never_two_at_once_and_survive_a_failure() -> None:
    queue = WorkQueue()
    stop = threading.Event()
    running: set[tuple[str, str]] = set()
    overlaps: list[tuple[str, str]] = []
    handled: list[tuple[str, str]] = []
    guard = threading.Lock()

    def handle(key: tuple[str, str], trigger: str) -> None:
        with guard:
            if key in running:
                overlaps.append(key)
            running.add(key)
        time.sleep(0.002)
        with guard:
            running.discard(key)
            handled.append(key)
        if key[1] == "bad":
            raise RuntimeError("a failed reconcile")

    workers = [threading.Thread(target=work, args=(queue, handle, stop)) for _ in range(4)]
    for worker in workers:
        worker.start()
    keys = [("ns", f"s{i % 10}") for i in range(200)] + [("ns", "bad")]
    for key in keys:
        queue.add(key, "pod")
    deadline = time.monotonic() + 10
    while (len(queue) or running) and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)
    stop.set()
    for worker in workers:
        worker.join(timeout=5)
    assert not overlaps
    assert set(handled) == set(keys)
    assert len(handled) < len(keys)  # repeats collapsed
    assert all(not worker.is_alive() for worker in workers)
