"""How fast the keeper fills a pool from empty, with nothing else running on the node.

`python -m bench.pool_refill [SIZE] [ROUNDS]` (defaults 20 and 3) makes a namespace,
asks for a pool of SIZE there, and records the seconds until 1, SIZE/2 and SIZE of its
pods can be handed out (Ready, their boundary probed and recorded); then it removes the
pool, waits for its pods to go, and does it again. It prints one JSON line per round and
removes everything it made. It is a tool for comparing keeper builds one after another
on one node, not a section: the `pool` section measures claims.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from bench.cluster_side import (
    POOL_PROFILE,
    Kube,
    delete_namespace,
    ensure_bench_profiles,
    make_namespace,
    pods_path,
    run_id,
    set_pool,
    warm_pool_pods,
)

POOL_KEY = "refill"
FILL_TIMEOUT_SECONDS = 240.0
POLL_SECONDS = 0.2


def fill(kube: Kube, namespace: str, size: int) -> dict[str, Any]:
    set_pool(kube, POOL_KEY, POOL_PROFILE, namespace, size)
    start = time.monotonic()
    reached: dict[int, float] = {}
    while time.monotonic() - start < FILL_TIMEOUT_SECONDS:
        count = warm_pool_pods(kube, namespace, POOL_KEY)
        for step in range(1, count + 1):
            reached.setdefault(step, round(time.monotonic() - start, 2))
        if count >= size:
            break
        time.sleep(POLL_SECONDS)
    full = reached.get(size)
    return {
        "size": size,
        "seconds_to_first": reached.get(1),
        "seconds_to_half": reached.get(size // 2),
        "seconds_to_full": full,
        "pods_per_second": round(size / full, 3) if full else None,
    }


def empty(kube: Kube, namespace: str) -> None:
    set_pool(kube, POOL_KEY, POOL_PROFILE, namespace, None)
    deadline = time.monotonic() + FILL_TIMEOUT_SECONDS
    while kube.get(pods_path(namespace))["items"] and time.monotonic() < deadline:
        time.sleep(1.0)


def main(argv: list[str]) -> int:
    size = int(argv[0]) if argv else 20
    rounds = int(argv[1]) if len(argv) > 1 else 3
    kube = Kube()
    ensure_bench_profiles(kube)
    namespace = make_namespace(kube, f"refill-{run_id()}", sandboxes=True)
    try:
        for _ in range(rounds):
            time.sleep(5.0)  # the last round's deletions settle
            print(json.dumps(fill(kube, namespace, size)), flush=True)
            empty(kube, namespace)
    finally:
        set_pool(kube, POOL_KEY, POOL_PROFILE, namespace, None)
        delete_namespace(kube, namespace)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
