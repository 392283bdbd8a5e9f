"""A proxy on loopback to the real API server that answers as an older or poorer one would.

No older API server can be started here, and a server's `/version` and discovery cannot be
changed from outside it, so a test points a kubeconfig at this proxy instead: plain HTTP
on 127.0.0.1, forwarding every request to the cluster's API server with the credentials
of the kubeconfig it was given (as `kubectl proxy` does), and passing one answer through
`rewrite` on the way back. It records each request's method and path, so a test can show
what went through it (nothing written, nothing watched).
"""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import yaml

from openblox.models.cluster_support import ADMISSION_DISCOVERY_PATH, VERSION_PATH
from openblox.transport import Session

# (request path without its query, the upstream answer's body) -> the body to send back.
Rewrite = Callable[[str, bytes], bytes]
# Hop-by-hop headers, and the ones this proxy sets itself.
_NOT_FORWARDED = {
    "authorization",
    "accept-encoding",
    "connection",
    "content-encoding",
    "content-length",
    "host",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
}


def older(git_version: str = "v1.29.0") -> Rewrite:
    """An API server that says it is `git_version`."""

    def rewrite(request_path: str, body: bytes) -> bytes:
        if request_path != VERSION_PATH:
            return body
        version = json.loads(body)
        version["gitVersion"] = git_version
        version["minor"] = git_version.split(".")[1]
        return json.dumps(version).encode()

    return rewrite


def without_admission_policies(request_path: str, body: bytes) -> bytes:
    """An API server whose ValidatingAdmissionPolicy v1 is turned off (--runtime-config)."""
    if request_path != ADMISSION_DISCOVERY_PATH:
        return body
    discovery = json.loads(body)
    discovery["resources"] = [
        resource
        for resource in discovery.get("resources", [])
        if not resource.get("name", "").startswith("validatingadmissionpolic")
    ]
    return json.dumps(discovery).encode()


class PretendingProxy:
    def __init__(self, kubeconfig: str, rewrite: Rewrite) -> None:
        self.session = Session.discover(kubeconfig)
        self.rewrite = rewrite
        self.requests: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def methods(self) -> set[str]:
        with self._lock:
            return {method for method, _ in self.requests}

    @property
    def paths(self) -> set[str]:
        with self._lock:
            return {request_path for _, request_path in self.requests}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def kubeconfig(self, directory: Path, namespace: str = "default") -> str:
        """A kubeconfig for the proxy: no credentials of its own, the proxy adds them."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "pretending", "cluster": {"server": self.url}}],
            "users": [{"name": "pretending", "user": {}}],
            "contexts": [
                {
                    "name": "pretending",
                    "context": {
                        "cluster": "pretending",
                        "user": "pretending",
                        "namespace": namespace,
                    },
                }
            ],
            "current-context": "pretending",
        }
        written = directory / "pretending.kubeconfig"
        written.write_text(yaml.safe_dump(config))
        return str(written)

    def __enter__(self) -> PretendingProxy:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def forward(
        self, method: str, target: str, headers: dict[str, str], body: bytes | None
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        with self._lock:
            self.requests.append((method, target.split("?", 1)[0]))
        upstream = urlsplit(self.session.server)
        connection = http.client.HTTPSConnection(
            upstream.hostname or "localhost",
            upstream.port or 443,
            timeout=60,
            context=self.session.ssl_context(),
        )
        try:
            connection.request(
                method,
                f"{upstream.path.rstrip('/')}{target}",
                body=body,
                headers={**headers, **self.session.authorization()},
            )
            response = connection.getresponse()
            data = response.read()
            kept = [(k, v) for k, v in response.getheaders() if k.lower() not in _NOT_FORWARDED]
            if response.status == 200:
                data = self.rewrite(target.split("?", 1)[0], data)
            return response.status, kept, data
        finally:
            connection.close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Forward(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _NOT_FORWARDED}
                status, kept, data = proxy.forward(self.command, self.path, headers, body)
                self.send_response(status)
                for key, value in kept:
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _any

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Forward
