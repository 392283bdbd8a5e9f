"""Before the operator starts: hold while the API server is one openblox does not support.

An operator started on an older API server (or one without ValidatingAdmissionPolicy v1)
fails in ways that do not name the cause and, exiting, crash-loops. Instead it waits
here, before kopf starts: one error line in its log, one Warning Event
(`UnsupportedKubernetes`) on its own Pod, `/healthz` answering so the liveness probe
does not restart it, and a look again every RECHECK_SECONDS; once the server qualifies
(an upgrade), it goes on to start as usual. Only a finding holds it: a check that cannot
be made (the API server not answering yet) lets it start as it always did.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from openblox.controller.events import EventRecorder
from openblox.controller.kube import Kube, path
from openblox.models.cluster_support import (
    ADMISSION_DISCOVERY_PATH,
    VERSION_PATH,
    Finding,
    refusal,
    server_findings,
    warnings,
)
from openblox.names import Reason
from openblox.transport import NotFound, TransportError

log = logging.getLogger(__name__)

RECHECK_SECONDS = 60.0
WAITING = f"the operator waits, and checks again every {RECHECK_SECONDS:.0f} s"


class ServerReader:
    """What the API server says of itself, judged (models.cluster_support)."""

    def __init__(self, kube: Kube) -> None:
        self._kube = kube
        self._warned: set[str] = set()

    def findings(self) -> list[Finding] | None:
        """The findings, or None when they could not be read."""
        try:
            version = self._kube.get(VERSION_PATH)
            try:
                discovery: object = self._kube.get(ADMISSION_DISCOVERY_PATH)
            except NotFound:
                discovery = None  # the group version is not served at all
        except (TransportError, OSError, ValueError) as error:
            log.warning("could not check the API server's version, starting anyway: %s", error)
            return None
        return server_findings(version, discovery, self._kube.session.server)

    def verdict(self) -> str | None:
        """Why the operator must wait, or None to start."""
        findings = self.findings()
        if findings is None:
            return None
        for finding in warnings(findings):
            if finding.message not in self._warned:
                self._warned.add(finding.message)
                log.warning("%s", finding.message)
        return refusal(findings, WAITING)


class Reporter:
    """Says why the operator waits: once in the log, once as an Event on its own Pod
    (the recorder writes one per distinct message)."""

    def __init__(self, kube: Kube, pod_name: str) -> None:
        self._kube = kube
        self._pod_name = pod_name
        self._events = EventRecorder(kube, pod_name)
        self._said: set[str] = set()
        self._pod: Mapping[str, Any] | None = None

    def __call__(self, message: str) -> None:
        if message not in self._said:
            self._said.add(message)
            log.error("%s", message)
        self._events.record(self._own_pod(), Reason.UNSUPPORTED_KUBERNETES, message)

    def _own_pod(self) -> Mapping[str, Any]:
        """The Pod as the Event's involved object: with its uid when it can be read, so
        `kubectl describe pod` shows the Event; by name alone otherwise."""
        if self._pod is not None:
            return self._pod
        namespace = self._kube.credentials.namespace
        reference = {"apiVersion": "v1", "kind": "Pod"}
        try:
            pod = self._kube.get(path(plural="pods", namespace=namespace, name=self._pod_name))
        except (TransportError, OSError, ValueError):
            return {**reference, "metadata": {"name": self._pod_name, "namespace": namespace}}
        self._pod = {**reference, "metadata": pod.get("metadata") or {}}
        return self._pod


def hold_while_unsupported(
    first: str,
    verdict: Callable[[], str | None],
    report: Callable[[str], None],
    sleep: Callable[[float], object] = time.sleep,
    interval: float = RECHECK_SECONDS,
) -> int:
    """Report `first` (a refusal), then look again every `interval` until `verdict` has
    nothing against the server, reporting each refusal; the number of refusals."""
    message: str | None = first
    refused = 0
    while message is not None:
        refused += 1
        report(message)
        sleep(interval)
        message = verdict()
    return refused


@contextmanager
def serving_health(endpoint: str) -> Iterator[ThreadingHTTPServer]:
    """`/healthz` (the path of `endpoint`, kopf's liveness URL) answered 200 until the
    block ends; then the port is free again for kopf's own."""
    parts = urlsplit(endpoint)
    health_path = parts.path or "/"

    class Health(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            found = self.path.split("?", 1)[0] == health_path
            body = b"waiting for a supported API server\n" if found else b""
            self.send_response(200 if found else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # a probe every 20 s is not news

    server = ThreadingHTTPServer((parts.hostname or "0.0.0.0", parts.port or 80), Health)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="health", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def wait_until_supported(liveness_endpoint: str) -> None:
    """The operator's start-up gate (see the module's docstring)."""
    try:
        kube = Kube.connect()
    except TransportError as error:
        log.warning("could not check the API server's version, starting anyway: %s", error)
        return
    reader = ServerReader(kube)
    message = reader.verdict()
    if message is None:
        return
    pod_name = os.environ.get("POD_NAME") or socket.gethostname()
    with serving_health(liveness_endpoint):
        hold_while_unsupported(
            message, reader.verdict, Reporter(kube, pod_name), interval=RECHECK_SECONDS
        )
    log.info("the API server at %s now qualifies; starting", kube.session.server)
