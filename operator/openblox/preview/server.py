"""The preview proxy: `/p/<token>/<path>` -> 127.0.0.1:<port> in the token's sandbox.

This module holds the TCP server (bounded connections, drained on shutdown) and the
Kubernetes backend, which finds the sandbox's pod and opens a `Tunnel` (one pods/exec
stream running the relay agent). Each connection is a `Conversation`
(conversation.py): its requests' tokens are checked first, with no I/O but reading the
mounted key ring, and only then relayed; bodies stream in both directions with their own
framing (http11.py), and a `101 Switching Protocols` reply (websockets) turns the
connection into a two-way byte pipe. One `PermitWatch` (permits.py) cuts every
connection whose link has expired or lost its key, whatever it is doing then.
"""

from __future__ import annotations

import contextlib
import logging
import socketserver
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client import Counter, Gauge

from openblox.names import CONTAINER_NAME, GROUP, LABEL_SANDBOX, PLURAL, VERSION
from openblox.preview.conversation import Conversation, Upstream
from openblox.preview.http11 import HTTPError, json_response
from openblox.preview.permits import PermitWatch
from openblox.preview.relay import Tunnel, agent_argv
from openblox.preview.tokens import Grant
from openblox.transport import Api, ApiError, ExecSocket, ExecStreamError, Session, path

log = logging.getLogger(__name__)

MAX_CONNECTIONS = 512
POD_CACHE_SECONDS = 10.0
API_REQUESTS = Counter(
    "openblox_preview_api_requests",
    "Requests the proxy made to the Kubernetes API server, by kind",
    ["kind"],
)
TUNNELS_OPENED = Counter("openblox_preview_tunnels_opened", "pods/exec tunnels opened")
TUNNELS_OPEN = Gauge("openblox_preview_tunnels_open", "pods/exec tunnels open now")


class KubeBackend:
    """Finds the sandbox's pod through the API server and opens the relay exec in it.

    Every call to the API server goes through `_count` (the metric proves that a refused
    token caused none).
    """

    def __init__(self, session: Session) -> None:
        self._session = session
        self._api = Api(session, user_agent="openblox-preview")
        self._pods: dict[tuple[str, str, str], tuple[str, float]] = {}
        self._lock = threading.Lock()

    def _pod(self, grant: Grant) -> str:
        """The pod of the Sandbox the grant names, checked against the grant's uid.

        The Sandbox is read on every new tunnel: a namesake made after the link was
        signed has another uid, and the link must not reach it, not even for a moment.
        Only the pod's ownership check is remembered for a while, per pod name.
        """
        try:
            API_REQUESTS.labels("get-sandbox").inc()
            body = self._api.get(
                path(
                    group=GROUP,
                    version=VERSION,
                    plural=PLURAL,
                    namespace=grant.namespace,
                    name=grant.sandbox,
                )
            )
        except ApiError as error:
            raise self._lookup_error(grant, error) from error
        if body["metadata"].get("uid") != grant.uid:
            raise HTTPError(404, "the sandbox this link was made for is gone")
        pod_name = str((body.get("status") or {}).get("podName") or "")
        if not pod_name:
            raise HTTPError(503, "the sandbox has no pod yet")
        key = (grant.namespace, grant.sandbox, grant.uid)
        with self._lock:
            cached = self._pods.get(key)
        if cached and cached[0] == pod_name and time.monotonic() - cached[1] < POD_CACHE_SECONDS:
            return pod_name
        try:
            API_REQUESTS.labels("get-pod").inc()
            pod = self._api.get(path(plural="pods", namespace=grant.namespace, name=pod_name))
        except ApiError as error:
            raise self._lookup_error(grant, error) from error
        # Only the operator may make pods with this label (admission), and it owns them.
        metadata = pod.get("metadata") or {}
        labels = metadata.get("labels") or {}
        owners = {ref.get("uid") for ref in metadata.get("ownerReferences") or []}
        if labels.get(LABEL_SANDBOX) != grant.sandbox or grant.uid not in owners:
            raise HTTPError(404, "the sandbox's pod is not one the operator made")
        with self._lock:
            self._pods[key] = (pod_name, time.monotonic())
        return pod_name

    @staticmethod
    def _lookup_error(grant: Grant, error: ApiError) -> HTTPError:
        if error.status == 404:
            return HTTPError(404, "the sandbox this link was made for is gone")
        log.warning("looking up %s/%s: %s", grant.namespace, grant.sandbox, error.reason)
        return HTTPError(502, f"the API server said {error.status}")

    def open(self, grant: Grant) -> Tunnel:
        pod = self._pod(grant)
        try:
            API_REQUESTS.labels("exec").inc()
            socket_ = ExecSocket(
                self._session,
                grant.namespace,
                pod,
                CONTAINER_NAME,
                agent_argv(grant.port),
                stdin=True,
                timeout=30,
            )
        except ExecStreamError as error:
            with self._lock:
                self._pods.pop((grant.namespace, grant.sandbox, grant.uid), None)
            log.warning("exec into %s/%s failed: %s", grant.namespace, pod, error)
            raise HTTPError(502, "could not reach the sandbox") from error
        TUNNELS_OPENED.inc()
        TUNNELS_OPEN.inc()
        return Tunnel(socket_, on_close=TUNNELS_OPEN.dec)


class PreviewServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        keys: Callable[[], Mapping[str, bytes]],
        backend: Upstream,
    ) -> None:
        self.backend = backend
        # Runs until the process ends, through the drain too: a connection given time to
        # finish is still cut at its link's expiry.
        self.watch = PermitWatch(keys)
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._active = 0
        self._active_lock = threading.Condition()
        super().__init__(address, _Handler)

    def drain(self, timeout: float) -> None:
        """After shutdown(): wait up to `timeout` for the open connections to finish."""
        deadline = time.monotonic() + timeout
        with self._active_lock:
            while self._active and time.monotonic() < deadline:
                self._active_lock.wait(deadline - time.monotonic())

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            with contextlib.suppress(OSError):
                request.sendall(json_response(503, "Service Unavailable", {"error": "busy"}, True))
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        with self._active_lock:
            self._active += 1
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()
            with self._active_lock:
                self._active -= 1
                self._active_lock.notify_all()


class _Handler(socketserver.BaseRequestHandler):
    server: PreviewServer

    def handle(self) -> None:
        Conversation(self.request, self.server.backend, self.server.watch).run()
