"""The shapes of load the pool section puts on a claim path, whichever system answers it:
a burst (all at once, from behind a barrier) and a sustained rate (open loop, each
claim in its own thread). A claim is a function of its name and its offset in the run
that returns a `Claim`, so openblox and agent-sandbox are driven the same way."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable

from bench.claims import Claim
from bench.cluster_side import Kube
from openblox.transport import ApiError

ClaimFunction = Callable[[str, float], Claim]
# Claims waiting at once before a sustained run stops issuing more.
MAX_IN_FLIGHT = 20


def burst(claim: ClaimFunction, names: list[str]) -> list[Claim]:
    results: list[Claim] = []
    barrier = threading.Barrier(len(names))
    guard = threading.Lock()

    def one(name: str) -> None:
        barrier.wait()
        result = claim(name, 0.0)
        with guard:
            results.append(result)

    threads = [threading.Thread(target=one, args=(name,)) for name in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def sustained(
    claim: ClaimFunction,
    delete: Callable[[str], object],
    prefix: str,
    rate: float,
    seconds: float,
) -> tuple[list[Claim], float | None]:
    """One claim every 1/rate s, each in its own thread; each deleted once Ready.

    Open loop, except that it stops issuing claims once MAX_IN_FLIGHT are waiting: past
    that the node is not keeping up, and more would only queue Pending pods for minutes.
    Returns the claims and when it stopped early (None if it ran the whole time).
    """
    count = int(rate * seconds)
    results: list[Claim] = []
    guard = threading.Lock()
    in_flight = [0]
    threads = []
    stopped: float | None = None
    started = time.monotonic()

    def one(index: int) -> None:
        name = f"{prefix}-{index}"
        result = claim(name, time.monotonic() - started)
        with guard:
            results.append(result)
            in_flight[0] -= 1
        with contextlib.suppress(Exception):
            delete(name)

    for index in range(count):
        delay = started + index / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        with guard:
            if in_flight[0] >= MAX_IN_FLIGHT:
                stopped = time.monotonic() - started
                break
            in_flight[0] += 1
        thread = threading.Thread(target=one, args=(index,))
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join()
    return sorted(results, key=lambda c: c.offset), stopped


def api_floor(kube: Kube, namespace: str, count: int) -> list[float]:
    """What the API server alone takes for `count` claims at once: each creates an object
    (the Sandbox), writes it again (the hand-out) and reads it back (the caller learning
    it is Ready), from as many threads. No operator, no watch fan-out: a lower bound."""
    results: list[float] = []
    barrier = threading.Barrier(count)
    guard = threading.Lock()
    base = f"/api/v1/namespaces/{namespace}/configmaps"

    def one(index: int) -> None:
        name = f"floor-{index}"
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}
        barrier.wait()
        started = time.monotonic()
        kube.request("POST", base, body)
        kube.request(
            "PATCH",
            f"{base}/{name}",
            {"data": {"claimed": "true"}},
            content_type="application/merge-patch+json",
        )
        kube.request("GET", f"{base}/{name}")
        with guard:
            results.append((time.monotonic() - started) * 1000)

    threads = [threading.Thread(target=one, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for index in range(count):
        with contextlib.suppress(ApiError):
            kube.request("DELETE", f"{base}/floor-{index}")
    return results
