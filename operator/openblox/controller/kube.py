"""A thin JSON client for the API server: the few verbs the operator uses, over http.client.

The operator does not load the `kubernetes` package. Its generated models, pydantic,
requests and oauthlib cost ~15 MiB of resident memory before a single object is seen,
and the operator needs none of them: every body it reads or writes is plain JSON.
Credentials come from the pod's ServiceAccount (token re-read as the kubelet rotates it),
or for development from a kubeconfig (token or client certificate; exec plugins are not
supported).
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
REQUEST_TIMEOUT_SECONDS = 30.0
TOKEN_REREAD_SECONDS = 60.0
JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


class ApiError(Exception):
    """A response from the API server that was not a success."""

    def __init__(self, status: int, reason: str, body: str = "") -> None:
        super().__init__(f"{status} {reason}: {body[:500]}")
        self.status = status
        self.reason = reason
        self.body = body


@dataclass(frozen=True)
class Credentials:
    server: str
    ca_file: str | None = None
    insecure: bool = False
    tls_server_name: str | None = None
    token: str | None = None
    token_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None

    @classmethod
    def in_cluster(cls) -> Credentials | None:
        host = os.environ.get("KUBERNETES_SERVICE_HOST")
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        if not host or not (SERVICE_ACCOUNT / "token").exists():
            return None
        if ":" in host:
            host = f"[{host}]"
        return cls(
            server=f"https://{host}:{port}",
            ca_file=str(SERVICE_ACCOUNT / "ca.crt"),
            token_file=str(SERVICE_ACCOUNT / "token"),
        )

    @classmethod
    def from_kubeconfig(cls, path: str | None = None) -> Credentials:
        import yaml

        location = path or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
        location = location or str(Path.home() / ".kube" / "config")
        config = yaml.safe_load(Path(location).read_text()) or {}
        base = Path(location).parent

        def named(kind: str, name: str) -> dict[str, Any]:
            for entry in config.get(kind) or []:
                if entry.get("name") == name:
                    return dict(entry.get(kind[:-1]) or {})
            raise ValueError(f"{location}: no {kind[:-1]} named {name!r}")

        context = named("contexts", config.get("current-context", ""))
        cluster = named("clusters", context["cluster"])
        user = named("users", context.get("user", ""))
        if user.get("exec") or user.get("auth-provider"):
            raise ValueError(f"{location}: exec and auth-provider users are not supported")

        def file_of(entry: Mapping[str, Any], key: str) -> str | None:
            if entry.get(f"{key}-data"):
                return _data_file(base64.b64decode(entry[f"{key}-data"]))
            if entry.get(key):
                return str(base / entry[key])
            return None

        return cls(
            server=str(cluster["server"]).rstrip("/"),
            ca_file=file_of(cluster, "certificate-authority"),
            insecure=bool(cluster.get("insecure-skip-tls-verify")),
            tls_server_name=cluster.get("tls-server-name"),
            token=user.get("token"),
            token_file=str(base / user["tokenFile"]) if user.get("tokenFile") else None,
            cert_file=file_of(user, "client-certificate"),
            key_file=file_of(user, "client-key"),
        )


def _data_file(data: bytes) -> str:
    handle, name = tempfile.mkstemp(prefix="openblox-kube-")
    with os.fdopen(handle, "wb") as out:
        out.write(data)
    return name


@dataclass
class _Token:
    value: str | None = None
    read_at: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)


class Kube:
    """Blocking, thread-safe (one keep-alive connection per thread), JSON in and out."""

    def __init__(
        self, credentials: Credentials, write_guard: Callable[[], None] | None = None
    ) -> None:
        self.credentials = credentials
        # Called before every request that changes something; it raises to refuse it
        # (the election's fence: a replica that does not hold the Lease writes nothing).
        self._write_guard = write_guard
        parts = urlsplit(credentials.server)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or "localhost"
        self._port = parts.port or (443 if self._https else 80)
        self._prefix = parts.path.rstrip("/")
        self._ssl = self._ssl_context() if self._https else None
        self._local = threading.local()
        self._token = _Token()

    @classmethod
    def connect(cls) -> Kube:
        return cls(Credentials.in_cluster() or Credentials.from_kubeconfig())

    def guarded(self, write_guard: Callable[[], None]) -> Kube:
        """A client with the same credentials whose every write passes `write_guard` first."""
        return Kube(self.credentials, write_guard)

    def guard_write(self) -> None:
        """Refuse now (the guard raises) if this client may not change anything."""
        if self._write_guard is not None:
            self._write_guard()

    # ------------------------------------------------------------------ plumbing

    def _ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=self.credentials.ca_file)
        if self.credentials.insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self.credentials.cert_file:
            context.load_cert_chain(self.credentials.cert_file, self.credentials.key_file)
        return context

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        if self._https:
            return http.client.HTTPSConnection(
                self._host, self._port, timeout=timeout, context=self._ssl
            )
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def bearer_token(self) -> str | None:
        if self.credentials.token_file is None:
            return self.credentials.token
        with self._token.lock:
            if self._token.value is None or time.monotonic() - self._token.read_at > (
                TOKEN_REREAD_SECONDS
            ):
                self._token.value = Path(self.credentials.token_file).read_text().strip()
                self._token.read_at = time.monotonic()
            return self._token.value

    def _headers(self, content_type: str | None) -> dict[str, str]:
        headers = {"Accept": JSON, "User-Agent": "openblox-operator"}
        token = self.bearer_token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    def url(self, path: str, params: Mapping[str, Any] | None = None) -> str:
        query = (
            f"?{urlencode({k: v for k, v in params.items() if v is not None})}" if params else ""
        )
        return f"{self._prefix}{path}{query}"

    # ------------------------------------------------------------------ verbs

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: Mapping[str, Any] | None = None,
        content_type: str = JSON,
    ) -> dict[str, Any]:
        if method != "GET":
            self.guard_write()
        payload = None if body is None else json.dumps(body).encode()
        headers = self._headers(content_type if payload is not None else None)
        target = self.url(path, params)
        for attempt in (1, 2):
            connection: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
            fresh = connection is None
            if connection is None:
                connection = self._connection(REQUEST_TIMEOUT_SECONDS)
                self._local.conn = connection
            try:
                connection.request(method, target, body=payload, headers=headers)
                response = connection.getresponse()
                data = response.read()
            except (
                http.client.RemoteDisconnected,
                http.client.BadStatusLine,
                ConnectionError,
                ssl.SSLEOFError,
            ):
                # The server closed an idle keep-alive connection: open a new one, once.
                connection.close()
                self._local.conn = None
                if fresh or attempt == 2:
                    raise
                continue
            except BaseException:
                connection.close()
                self._local.conn = None
                raise
            if response.status >= 400:
                raise ApiError(response.status, response.reason, data.decode("utf-8", "replace"))
            result: dict[str, Any] = json.loads(data) if data else {}
            return result
        raise AssertionError("unreachable")

    def get(self, path: str, **params: Any) -> dict[str, Any]:
        return self.request("GET", path, params=params)

    def post(self, path: str, body: Any) -> dict[str, Any]:
        return self.request("POST", path, body)

    def put(self, path: str, body: Any) -> dict[str, Any]:
        return self.request("PUT", path, body)

    def patch(self, path: str, body: Any, content_type: str = MERGE_PATCH) -> dict[str, Any]:
        return self.request("PATCH", path, body, content_type=content_type)

    def delete(self, path: str, body: Any = None) -> dict[str, Any]:
        return self.request("DELETE", path, body)

    def watch(
        self, path: str, *, resource_version: str, timeout_seconds: int, **params: Any
    ) -> Iterator[dict[str, Any]]:
        """Events of one watch request (ends when the server closes it), on its own connection."""
        connection = self._connection(timeout_seconds + 30.0)
        target = self.url(
            path,
            {
                **params,
                "watch": "1",
                "resourceVersion": resource_version,
                "timeoutSeconds": timeout_seconds,
                "allowWatchBookmarks": "false",
            },
        )
        try:
            connection.request("GET", target, headers=self._headers(None))
            response = connection.getresponse()
            if response.status >= 400:
                raise ApiError(response.status, response.reason, response.read().decode())
            for line in response:
                if line.strip():
                    event: dict[str, Any] = json.loads(line)
                    if event.get("type") == "ERROR":
                        status = event.get("object") or {}
                        raise ApiError(
                            int(status.get("code") or 500),
                            str(status.get("reason") or "Error"),
                            str(status.get("message") or ""),
                        )
                    yield event
        finally:
            connection.close()


def path(
    *,
    group: str = "",
    version: str = "v1",
    plural: str,
    namespace: str | None = None,
    name: str | None = None,
    subresource: str | None = None,
) -> str:
    """The REST path of a collection or an object."""
    parts = ["/api", version] if not group else ["/apis", group, version]
    if namespace is not None:
        parts += ["namespaces", quote(namespace, safe="")]
    parts.append(plural)
    if name is not None:
        parts.append(quote(name, safe=""))
    if subresource:
        parts.append(subresource)
    return "/".join(parts)


def status_of(error: BaseException) -> int | None:
    """The HTTP status of an API error, or None for anything else."""
    status = getattr(error, "status", None) if isinstance(error, ApiError) else None
    return status if isinstance(status, int) else None


def refusal_reason(error: BaseException) -> str:
    """Why the API server refused a request, as its Status message says it, without the
    object's name (`pods "x" is forbidden: ` goes), so that one cause reads the same for
    every object it refuses; the error's text if it carries no Status."""
    try:
        message = json.loads(getattr(error, "body", "") or "{}").get("message")
    except (ValueError, AttributeError):
        message = None
    if not isinstance(message, str) or not message:
        return str(error)
    _, forbidden, rest = message.partition(" is forbidden: ")
    return rest if forbidden else message


def is_not_found(error: BaseException) -> bool:
    return status_of(error) == 404


def is_conflict(error: BaseException) -> bool:
    return status_of(error) == 409


def is_namespace_terminating(error: BaseException) -> bool:
    """A 403 for creating something in a namespace that is being deleted."""
    return status_of(error) == 403 and "NamespaceTerminating" in getattr(error, "body", "")
