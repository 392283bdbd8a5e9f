"""`python -m openblox.preview`: the preview proxy.

Environment: OPENBLOX_PREVIEW_PORT (8080), OPENBLOX_PREVIEW_METRICS_PORT (9090; Prometheus
text at /metrics), OPENBLOX_PREVIEW_KEYS (the mounted key Secret,
/etc/openblox/preview-keys). `/healthz` on the main port answers 200.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from pathlib import Path
from types import FrameType

from prometheus_client import start_http_server

from openblox.preview.keys import MountedKeyRing
from openblox.preview.server import KubeBackend, PreviewServer
from openblox.transport import Session

# On SIGTERM: keep serving this long, then stop accepting and give open requests this long
# (the pod's terminationGracePeriodSeconds covers both).
DRAIN_SECONDS = 3.0
FINISH_SECONDS = 20.0


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    port = int(os.environ.get("OPENBLOX_PREVIEW_PORT", "8080"))
    metrics_port = int(os.environ.get("OPENBLOX_PREVIEW_METRICS_PORT", "9090"))
    ring = MountedKeyRing(
        Path(os.environ.get("OPENBLOX_PREVIEW_KEYS", "/etc/openblox/preview-keys"))
    )
    # In its pod, the ServiceAccount; a kubeconfig only when KUBECONFIG names one.
    session = Session.discover()
    start_http_server(metrics_port)
    server = PreviewServer(("0.0.0.0", port), lambda: ring.get().keys, KubeBackend(session))

    def stop(_signum: int, _frame: FrameType | None) -> None:
        def later() -> None:
            # Keep accepting while the Service's endpoints catch up with the pod's end.
            time.sleep(DRAIN_SECONDS)
            server.shutdown()

        threading.Thread(target=later, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    keys = sorted(ring.get().keys)
    logging.info("preview proxy on :%d (metrics :%d), keys %s", port, metrics_port, keys)
    server.serve_forever()
    server.server_close()
    server.drain(FINISH_SECONDS)


if __name__ == "__main__":
    main()
