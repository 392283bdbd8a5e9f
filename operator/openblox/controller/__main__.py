"""`python -m openblox.controller`: run the operator (the image's entrypoint)."""

from __future__ import annotations

import argparse
import logging

import kopf
from prometheus_client import start_http_server

import openblox.controller.handlers  # noqa: F401  (registers the handlers)
from openblox.controller.kube import Kube
from openblox.controller.peering import PEERING_NAME, ensure_peering


def main() -> None:
    parser = argparse.ArgumentParser(prog="openblox-operator")
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
    ensure_peering(Kube.connect())
    kopf.run(
        clusterwide=True,
        liveness_endpoint=args.liveness,
        standalone=False,
        peering_name=PEERING_NAME,
    )


if __name__ == "__main__":
    main()
