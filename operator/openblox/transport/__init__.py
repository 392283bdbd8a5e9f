"""How openblox talks to the API server: the one transport, for every part of the project.

It imports neither the `kubernetes` package nor the client, so the operator and the
preview proxy load it without either. The pure modules (no I/O, unit-tested) are the
core another transport (asyncio) builds on; the others do blocking I/O:

- `frames` (pure): the exec channel protocol v5, the exec request path, exit codes;
- `errors` (pure): typed API errors (NotFound, Conflict, Forbidden, Invalid, ...) made
  from the status and the Status body, and ExecStreamError, CredentialsError;
- `rest` (pure): REST paths, request targets, headers, watch events;
- `credentials` (pure): the one order credentials are looked for in, kubeconfig merging
  and parsing, exec credential plugins' output;
- `discovery`: reads the kubeconfig or the ServiceAccount, in that order;
- `session`: the credentials in use (token re-read or re-fetched, TLS context);
- `sync_api`: the request path (`Api.get/post/patch/delete/watch`);
- `tls`: a TLS connection one thread writes while another reads;
- `sync_exec`: one `pods/exec` over a websocket (websocket-client, over `tls`).

Their asyncio twins, for `AsyncClient`, pair with them by name: `async_api` and
`async_exec`, over aiohttp (ADR 0011). So an exec websocket is opened in two places,
`sync_exec` and `async_exec`, both here and on the one pure `frames` core; nothing outside
this package opens one (tests/unit/test_layering.py). They are not imported here, so a process that
does not use them never loads aiohttp; `ExecSocket` is loaded on first use, so one that
never opens an exec (the CLI's `ls`, a client that has not run a command yet) never
loads websocket-client.

Credential order (see `credentials`): an explicit kubeconfig > KUBECONFIG > the pod's
ServiceAccount > ~/.kube/config.
"""

from typing import TYPE_CHECKING, Any

from openblox.transport.credentials import Credentials
from openblox.transport.discovery import load_credentials
from openblox.transport.errors import (
    ApiError,
    AuthorizerRefused,
    BadRequest,
    ClientError,
    Conflict,
    CredentialsError,
    ExecOutputTooLarge,
    ExecStreamError,
    Forbidden,
    Gone,
    Invalid,
    NotFound,
    ServerError,
    TooManyRequests,
    TransportError,
    Unauthorized,
    is_conflict,
    is_namespace_terminating,
    is_not_found,
    status_of,
)
from openblox.transport.frames import (
    ERROR,
    STDERR,
    STDIN,
    STDOUT,
    ExecOutput,
    Frame,
    exit_code_from_status,
)
from openblox.transport.rest import MERGE_PATCH, STRATEGIC_MERGE_PATCH, path
from openblox.transport.session import Session
from openblox.transport.sync_api import Api

if TYPE_CHECKING:
    from openblox.transport.sync_exec import ExecSocket

__all__ = [
    "ERROR",
    "MERGE_PATCH",
    "STDERR",
    "STDIN",
    "STDOUT",
    "STRATEGIC_MERGE_PATCH",
    "Api",
    "ApiError",
    "AuthorizerRefused",
    "BadRequest",
    "ClientError",
    "Conflict",
    "Credentials",
    "CredentialsError",
    "ExecOutput",
    "ExecOutputTooLarge",
    "ExecSocket",
    "ExecStreamError",
    "Forbidden",
    "Frame",
    "Gone",
    "Invalid",
    "NotFound",
    "ServerError",
    "Session",
    "TooManyRequests",
    "TransportError",
    "Unauthorized",
    "exit_code_from_status",
    "is_conflict",
    "is_namespace_terminating",
    "is_not_found",
    "load_credentials",
    "path",
    "status_of",
]


def __getattr__(name: str) -> Any:
    if name == "ExecSocket":
        from openblox.transport.sync_exec import ExecSocket

        return ExecSocket
    raise AttributeError(f"module 'openblox.transport' has no attribute {name!r}")
