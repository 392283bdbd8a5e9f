"""`python -m openblox.controller`: run the operator (the image's entrypoint)."""

from __future__ import annotations

import argparse
import logging
import time

import kopf
from prometheus_client import start_http_server

import openblox.controller.handlers  # noqa: F401  (registers the handlers)
from openblox.controller.kube import Kube, is_not_found

PEERING_NAME = "openblox-operator"
PEERING_GROUP = "kopf.dev"
PEERING_PLURAL = "clusterkopfpeerings"


def ensure_peering_object(name: str, timeout: float = 120.0) -> None:
    """kopf needs its peering object to exist, or it never starts handling; replicas meet
    there. Created here (the CRD may have been applied a moment ago, so keep trying) and
    confirmed by reading it back."""
    custom = Kube.connect().custom
    body = {"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering", "metadata": {"name": name}}
    deadline = time.monotonic() + timeout
    while True:
        try:
            custom.get_cluster_custom_object(PEERING_GROUP, "v1", PEERING_PLURAL, name)
            return
        except Exception as error:
            if not is_not_found(error) and time.monotonic() > deadline:
                raise
        try:
            custom.create_cluster_custom_object(PEERING_GROUP, "v1", PEERING_PLURAL, body)
        except Exception as error:
            if time.monotonic() > deadline:
                raise RuntimeError(f"could not create the peering object {name}") from error
            logging.getLogger(__name__).info("peering object not created yet: %s", error)
            time.sleep(2)


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
    kopf.run(
        clusterwide=True,
        liveness_endpoint=args.liveness,
        standalone=False,
        peering_name="openblox-operator",
    )


if __name__ == "__main__":
    main()
