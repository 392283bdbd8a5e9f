"""The operator's API client: the transport's request path, with the operator's fence.

The operator does not load the `kubernetes` package. Its generated models, pydantic,
requests and oauthlib cost ~15 MiB of resident memory before a single object is seen,
and the operator needs none of them: every body it reads or writes is plain JSON.
Credentials are found in the transport's one order (`openblox.transport.credentials`):
in its pod, the ServiceAccount (token re-read as the kubelet rotates it).
"""

from __future__ import annotations

from openblox.names import GROUP, OPERATOR, PLURAL, VERSION
from openblox.transport import (
    MERGE_PATCH,
    STRATEGIC_MERGE_PATCH,
    Api,
    ApiError,
    Credentials,
    Session,
    is_conflict,
    is_namespace_terminating,
    is_not_found,
    load_credentials,
    path,
    status_of,
)
from openblox.transport.errors import status_object
from openblox.transport.sync_api import WriteGuard

__all__ = [
    "MERGE_PATCH",
    "STRATEGIC_MERGE_PATCH",
    "ApiError",
    "Credentials",
    "Kube",
    "is_conflict",
    "is_namespace_terminating",
    "is_not_found",
    "path",
    "refusal_reason",
    "sandbox_path",
    "status_of",
]


def sandbox_path(namespace: str, name: str, subresource: str | None = None) -> str:
    """The request path of one Sandbox (or its `status` subresource)."""
    return path(
        group=GROUP,
        version=VERSION,
        plural=PLURAL,
        namespace=namespace,
        name=name,
        subresource=subresource,
    )


class Kube(Api):
    """Blocking, thread-safe (one keep-alive connection per thread), JSON in and out."""

    def __init__(
        self, credentials: Credentials | Session, write_guard: WriteGuard | None = None
    ) -> None:
        session = credentials if isinstance(credentials, Session) else Session(credentials)
        super().__init__(session, write_guard, user_agent=OPERATOR)

    @classmethod
    def connect(cls) -> Kube:
        return cls(load_credentials())

    @property
    def credentials(self) -> Credentials:
        return self.session.credentials

    def bearer_token(self) -> str | None:
        return self.session.bearer_token()

    def guarded(self, write_guard: WriteGuard) -> Kube:
        """A client with the same credentials whose every write is inside `write_guard`."""
        return Kube(self.session, write_guard)


def refusal_reason(error: BaseException) -> str:
    """Why the API server refused a request, as its Status message says it, without the
    object's name (`pods "x" is forbidden: ` goes), so that one cause reads the same for
    every object it refuses; the error's text if it carries no Status."""
    body = error.body if isinstance(error, ApiError) else None
    message = status_object(body).get("message")
    if not isinstance(message, str) or not message:
        return str(error)
    _, forbidden, rest = message.partition(" is forbidden: ")
    return rest if forbidden else message
