"""`python -m openblox.controller`: run the operator (the image's entrypoint)."""

from __future__ import annotations

# The image installs `openblox[operator]`, which does not bring the `kubernetes` package:
# kopf, which would load it when present to recognise its models and log in through it,
# finds it absent, and the operator talks to the API server only through
# `openblox.transport` (controller/kube.py) and logs kopf in with the same credentials
# (handlers.py). ADR 0018.
import argparse
import logging

import kopf
from prometheus_client import start_http_server

import openblox.controller.handlers  # noqa: F401  (registers the handlers)
from openblox.controller.support_gate import wait_until_supported
from openblox.names import OPERATOR


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
