"""Building API requests and reading watch streams, without I/O."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlencode

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
    params: Mapping[str, Any], *, resource_version: str | None, timeout_seconds: int
) -> dict[str, Any]:
    """The query of one watch request, starting after `resource_version`."""
    return {
        **params,
        "watch": "1",
        "resourceVersion": resource_version,
        "timeoutSeconds": timeout_seconds,
        "allowWatchBookmarks": "false",
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
