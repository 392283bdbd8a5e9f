"""`python -m openblox.controller`: run the operator (the image's entrypoint)."""

from __future__ import annotations

import argparse
import logging

import kopf
from prometheus_client import start_http_server

import openblox.controller.handlers  # noqa: F401  (registers the handlers)


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
    start_http_server(args.metrics_port)
    kopf.run(
        clusterwide=True,
        liveness_endpoint=args.liveness,
        standalone=False,
        peering_name="openblox-operator",
    )


if __name__ == "__main__":
    main()
