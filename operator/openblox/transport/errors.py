"""Typed errors for what the API server refused, carrying its Status reason and message.

Pure: `api_error` turns a status code and a response body into the error to raise, so the
sync layer here and any other transport (asyncio) raise the same types. Network and TLS
failures are not API errors: they propagate as the OSError or TimeoutError they are.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

# How much of a body that is not a Status goes into a message: enough to debug, and a
# data blob (or a secret a misbehaving proxy echoed) does not flood a log.
TEXT_BODY_LIMIT = 500


class TransportError(Exception):
    """Base of every error this package raises."""


class CredentialsError(TransportError):
    """No usable credentials: nothing found, or a kubeconfig that cannot be used."""


class ExecStreamError(TransportError):
    """The exec stream could not be opened, or broke; what the command did is unknown.

    `status_code` is the API server's HTTP status when it refused the upgrade (404: no
    such pod; 403: not allowed), else None.
    """

    def __init__(self, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class ExecOutputTooLarge(ExecStreamError):
    """More came on one of an exec's channels than its reader accepts: the reader stopped
    there, and the stream is closed. What the command did is unknown."""

    def __init__(self, channel: str, limit: int) -> None:
        super().__init__(f"the exec's {channel} went past {limit} bytes, so reading stopped")
        self.channel = channel
        self.limit = limit


class ApiError(TransportError):
    """A response from the API server that was not a success.

    `status` is the HTTP status; `reason` the HTTP reason phrase the caller gave (kept for
    the operator's callers); `status_reason` and `message` are the Status object's fields
    (`NotFound`, `AlreadyExists`, `Invalid`, `NamespaceTerminating`, ...), empty when the
    body was not a Status; `details` its details.
    """

    def __init__(self, status: int, reason: str, body: str = "") -> None:
        self.status = status
        self.reason = reason
        self.body = body
        parsed = status_object(body)
        self.status_reason = str(parsed.get("reason") or "")
        self.message = str(parsed.get("message") or "") or body[:TEXT_BODY_LIMIT]
        self.details: Mapping[str, Any] = dict(parsed.get("details") or {})
        super().__init__(f"{status} {reason}: {self.message}".rstrip(": "))


class ClientError(ApiError):
    """4xx: the request was refused as it stands."""


class ServerError(ApiError):
    """5xx: the API server (or something behind it) failed."""


class BadRequest(ClientError):
    """400."""


class Unauthorized(ClientError):
    """401: the credentials were not accepted (an expired token, say)."""


class Forbidden(ClientError):
    """403: RBAC, an admission policy, or a terminating namespace refused it."""


class AuthorizerRefused(Forbidden):
    """403 from the API server's authorizer (RBAC, say): these credentials may not do this.

    Nothing about the object was judged: the request never reached admission. An API
    server that has just started answers so too, for a few seconds, until it has loaded
    the RBAC objects (Kubernetes serves requests before its authorizer's caches are
    filled), so right after an API server restart this refusal may not last.
    """


# The authorizer's refusal: "<resource> ["<name>" ]is forbidden: User "<name>" cannot
# <verb> ..." (k8s.io/apiserver's responsewriters.forbiddenMessage). Admission refusals
# carry the plugin's or policy's own words after "is forbidden: ".
_QUOTED = r'"(?:[^"\\]|\\.)*"'  # Go's %q
_AUTHORIZER_REFUSAL = re.compile(rf"^\S+ (?:{_QUOTED} )?is forbidden: User {_QUOTED} cannot ")


class NotFound(ClientError):
    """404."""


class Conflict(ClientError):
    """409: the object exists (`AlreadyExists`), or a resourceVersion precondition failed."""


class Gone(ClientError):
    """410: a watch's resourceVersion is too old; list again."""


class Invalid(ClientError):
    """422: the object failed validation (schema, CEL, or a ValidatingAdmissionPolicy)."""


class TooManyRequests(ClientError):
    """429: throttled (API priority and fairness), or an eviction a PDB refused."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: TooManyRequests,
}


def error_class(status: int) -> type[ApiError]:
    """The most specific error type for an HTTP status."""
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    if 400 <= status < 500:
        return ClientError
    if 500 <= status < 600:
        return ServerError
    return ApiError


def api_error(status: int, reason: str, body: bytes | str = b"") -> ApiError:
    """The error to raise for a response of `status` with `body` (a Status, usually)."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    error = error_class(status)(status, reason, text)
    if isinstance(error, Forbidden) and _AUTHORIZER_REFUSAL.match(error.message):
        return AuthorizerRefused(status, reason, text)
    return error


def status_object(body: bytes | str | None) -> Mapping[str, Any]:
    """The body as a Status object, or {} when it is not one (not JSON, another kind)."""
    if not body:
        return {}
    try:
        parsed = json.loads(body)
    except ValueError:
        return {}
    if not isinstance(parsed, dict) or parsed.get("kind", "Status") != "Status":
        return {}
    return parsed


def status_of(error: BaseException) -> int | None:
    """The HTTP status of an API error, or None for anything else."""
    return error.status if isinstance(error, ApiError) else None


def is_not_found(error: BaseException) -> bool:
    return status_of(error) == 404


def is_conflict(error: BaseException) -> bool:
    return status_of(error) == 409


def is_namespace_terminating(error: BaseException) -> bool:
    """A 403 for creating something in a namespace that is being deleted."""
    return status_of(error) == 403 and "NamespaceTerminating" in getattr(error, "body", "")
