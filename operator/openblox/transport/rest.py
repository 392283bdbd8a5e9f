"""Building API requests, deciding what their answers mean, and reading watch streams,
without I/O: the request path's core, which the blocking path (`sync_api`, over
http.client) and the asyncio one (`async_api`, over aiohttp) only send and receive for.

Requests are named tuples, not dataclasses: every client pays for their classes at import."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NamedTuple, Protocol
from urllib.parse import quote, urlencode, urlsplit

from openblox.transport.errors import api_error

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


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


def target(prefix: str, request_path: str, params: Mapping[str, Any] | None = None) -> str:
    """The request target: the server's path prefix, the path, and the query (None dropped)."""
    query = {key: value for key, value in (params or {}).items() if value is not None}
    return f"{prefix}{request_path}" + (f"?{urlencode(query)}" if query else "")


def watch_params(
    params: Mapping[str, Any],
    *,
    resource_version: str | None,
    timeout_seconds: int,
    bookmarks: bool = False,
) -> dict[str, Any]:
    """The query of one watch request, starting after `resource_version`; with `bookmarks`,
    the server also sends BOOKMARK events that carry only a newer resourceVersion."""
    return {
        **params,
        "watch": "1",
        "resourceVersion": resource_version,
        "timeoutSeconds": timeout_seconds,
        "allowWatchBookmarks": "true" if bookmarks else "false",
    }


def headers(
    authorization: Mapping[str, str], content_type: str | None, user_agent: str
) -> dict[str, str]:
    result = {"Accept": JSON, "User-Agent": user_agent, **authorization}
    if content_type:
        result["Content-Type"] = content_type
    return result


def encode_body(body: Any) -> bytes | None:
    return None if body is None else json.dumps(body).encode()


def decode_body(data: bytes) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(data) if data else {}
    return result


def watch_event(line: bytes) -> dict[str, Any] | None:
    """The event on one line of a watch response; None for a blank line. An ERROR event
    (a 410 for a starting point too old, say) raises its Status as the typed error."""
    if not line.strip():
        return None
    event: dict[str, Any] = json.loads(line)
    if event.get("type") == "ERROR":
        status = event.get("object") or {}
        raise api_error(
            int(status.get("code") or 500),
            str(status.get("reason") or "Error"),
            json.dumps(status),
        )
    return event


class Call(NamedTuple):
    """One API request, as its caller means it: a refusal is its typed error, the answer
    its decoded JSON body."""

    method: str
    path: str
    body: Any = None
    params: Mapping[str, Any] | None = None
    content_type: str = JSON


class Watch(NamedTuple):
    """One watch request: the events after `resource_version`, for `timeout_seconds`
    (BOOKMARK events too, with `bookmarks`)."""

    path: str
    resource_version: str | None
    timeout_seconds: int
    params: Mapping[str, Any]
    bookmarks: bool = False


class Prepared(NamedTuple):
    """One request as it goes out: the method, the target (path and query under the
    server's prefix), the headers and the body."""

    method: str
    target: str
    headers: Mapping[str, str]
    body: bytes | None = None


class Endpoint:
    """How one client's requests to one API server are prepared: under the server's path
    prefix, with the client's User-Agent, its extra headers and the caller's credentials."""

    def __init__(
        self, server: str, user_agent: str, extra_headers: Mapping[str, str] | None = None
    ) -> None:
        self.prefix = urlsplit(server).path.rstrip("/")
        self.user_agent = user_agent
        self.extra_headers = dict(extra_headers or {})

    def headers(self, authorization: Mapping[str, str], content_type: str | None) -> dict[str, str]:
        return {**headers(authorization, content_type, self.user_agent), **self.extra_headers}

    def prepare(self, call: Call, authorization: Mapping[str, str]) -> Prepared:
        payload = encode_body(call.body)
        sent_as = call.content_type if payload is not None else None
        where = target(self.prefix, call.path, call.params)
        return Prepared(call.method, where, self.headers(authorization, sent_as), payload)

    def prepare_watch(self, watch: Watch, authorization: Mapping[str, str]) -> Prepared:
        query = watch_params(
            watch.params,
            resource_version=watch.resource_version,
            timeout_seconds=watch.timeout_seconds,
            bookmarks=watch.bookmarks,
        )
        where = target(self.prefix, watch.path, query)
        return Prepared("GET", where, self.headers(authorization, None))


class Renewable(Protocol):
    """The credentials a request is sent with (`session.Session`)."""

    @property
    def refreshable(self) -> bool: ...

    def authorization(self) -> dict[str, str]: ...

    def invalidate(self) -> None: ...


class Exchange:
    """One request and its answer, without I/O. Send `next_request()` until it is None,
    giving each answer to `receive`; then `body()` is the decoded JSON.

    A 401 with credentials that can change (a token the kubelet rotates, an exec plugin's
    that expired) is sent once more with them fetched afresh; any other refusal raises
    its typed error (NotFound, Conflict, Forbidden, ...).
    """

    def __init__(self, endpoint: Endpoint, credentials: Renewable, call: Call) -> None:
        self._endpoint = endpoint
        self._credentials = credentials
        self._call = call
        self._sent = 0
        self._answer: tuple[int, str, bytes] | None = None

    def next_request(self) -> Prepared | None:
        if self._answer is not None:
            status = self._answer[0]
            if status != 401 or self._sent > 1 or not self._credentials.refreshable:
                return None
            self._credentials.invalidate()  # a rotated or expired token: fetch it once more
        self._sent += 1
        return self._endpoint.prepare(self._call, self._credentials.authorization())

    def receive(self, status: int, reason: str, data: bytes) -> None:
        self._answer = (status, reason, data)

    def body(self) -> dict[str, Any]:
        return decode_body(self.content())

    def content(self) -> bytes:
        """The answer's body as it came (a pod's log is text, not JSON)."""
        if self._answer is None:
            raise RuntimeError("no answer was received")
        status, reason, data = self._answer
        if status >= 400:
            raise api_error(status, reason, data)
        return data
