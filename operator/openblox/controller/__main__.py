"""`python -m openblox.controller`: run the operator (the image's entrypoint)."""

from __future__ import annotations

import sys

# kopf imports the `kubernetes` package at import time when it is installed (it is: the
# openblox client uses it), only to recognise its models and to log in through it. The
# operator uses neither (its own thin client, kopf's own ServiceAccount login), and the
# package with what it pulls in (pydantic, requests, oauthlib, dateutil) is ~15 MiB of
# resident memory. Marking it absent makes every `import kubernetes` raise ImportError,
# which kopf handles as "not installed".
for _absent in ("kubernetes", "kubernetes_asyncio", "pykube"):
    sys.modules.setdefault(_absent, None)  # type: ignore[arg-type]

import argparse  # noqa: E402
import logging  # noqa: E402

import kopf  # noqa: E402
from prometheus_client import start_http_server  # noqa: E402

import openblox.controller.handlers  # noqa: E402, F401  (registers the handlers)
from openblox.controller.support_gate import wait_until_supported  # noqa: E402
from openblox.names import OPERATOR  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(prog=OPERATOR)
    parser.add_argument(
        "--liveness",
        default="http://0.0.0.0:8080/healthz",
        help="where kopf serves its liveness probe",
    )
    parser.add_argument("--metrics-port", type=int, default=9090)
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # kopf logs every handler success at INFO; a reconcile per watch event makes that noise.
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    start_http_server(args.metrics_port)
    # Before kopf, whose liveness endpoint answers only once its start-up is done: on an
    # API server openblox does not support, wait here, saying why, instead of crash-looping.
    wait_until_supported(args.liveness)
    # standalone: no kopf peering. The operator's own Lease (controller/election.py) is
    # its one election (docs/adr/0009-one-election-on-a-lease.md).
    kopf.run(clusterwide=True, liveness_endpoint=args.liveness, standalone=True)


if __name__ == "__main__":
    main()
