"""Whether containerd serves a runtime handler, read from `crictl info -o json` on stdin.

    crictl info -o json | python3 cluster/containerd_handlers.py runsc CONFIG_PATH

Exits 0 when it does. Otherwise it says which handlers containerd serves and where its
configuration is, and exits 1: containerd only warns about keys it does not know, so a
handler written under a key of another schema is silently absent.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def served_handlers(info: Any) -> set[str]:
    """The runtime handlers `crictl info` reports (containerd 2 fills `runtimeHandlers`)."""
    if not isinstance(info, dict):
        return set()
    handlers = info.get("runtimeHandlers") or []
    return {
        str(handler["name"])
        for handler in handlers
        if isinstance(handler, dict) and isinstance(handler.get("name"), str) and handler["name"]
    }


def main(argv: list[str]) -> int:
    wanted, config = argv[1], argv[2]
    try:
        info = json.load(sys.stdin)
    except ValueError as error:
        print(f"crictl info did not answer in JSON: {error}", file=sys.stderr)
        return 1
    served = served_handlers(info)
    if wanted in served:
        return 0
    print(
        f"containerd has no {wanted} handler (it serves: {', '.join(sorted(served)) or 'none'}); "
        f"see [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.{wanted}] in {config}",
        file=sys.stderr,
    )
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
