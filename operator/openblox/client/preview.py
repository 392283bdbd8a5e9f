"""Minting preview links on the client side: `Sandbox.preview_url(port, ttl=...)`.

Who may mint: whoever may read the key Secret `openblox-preview-keys` in openblox-system
(the Role `openblox-preview-signer` grants exactly that, plus reading the ConfigMap
`openblox-preview`). The client signs locally with the current key; nothing else is
asked of the cluster. A link works only for the Sandbox it was made for: the token
carries the Sandbox's uid, so a new Sandbox of the same name is not reachable with it.

The URL's base is the `base_url` argument, else `baseURL` in the ConfigMap
`openblox-preview`, else the proxy's in-cluster Service address.
"""

from __future__ import annotations

import base64
import time
from typing import TYPE_CHECKING, Any

from kubernetes.client.exceptions import ApiException

from openblox.client.arguments import checked_port, checked_ttl
from openblox.client.errors import OpenbloxClientError
from openblox.preview.keys import SECRET_NAME, KeyRing, KeyRingError
from openblox.preview.tokens import MAX_TTL_SECONDS, Grant, sign

if TYPE_CHECKING:
    from openblox.client.sync import Sandbox

SYSTEM_NAMESPACE = "openblox-system"
CONFIG_MAP = "openblox-preview"
DEFAULT_BASE_URL = "http://openblox-preview.openblox-system.svc"
DEFAULT_TTL_SECONDS = 3600


class PreviewUnavailable(OpenbloxClientError):
    """No key to sign with: the Secret is missing, unreadable to this caller, or invalid."""


def read_key_ring(core: Any) -> KeyRing:
    try:
        secret = core.read_namespaced_secret(SECRET_NAME, SYSTEM_NAMESPACE)
    except ApiException as error:
        raise PreviewUnavailable(
            f"cannot read the preview key Secret {SYSTEM_NAMESPACE}/{SECRET_NAME} "
            f"({error.status}); minting links needs the openblox-preview-signer Role"
        ) from error
    entries = {name: base64.b64decode(value) for name, value in (secret.data or {}).items()}
    try:
        return KeyRing.from_mapping(entries)
    except KeyRingError as error:
        raise PreviewUnavailable(f"the preview key Secret is not usable: {error}") from error


def base_url(core: Any) -> str:
    try:
        config_map = core.read_namespaced_config_map(CONFIG_MAP, SYSTEM_NAMESPACE)
    except ApiException:
        return DEFAULT_BASE_URL
    return str((config_map.data or {}).get("baseURL") or DEFAULT_BASE_URL)


def preview_url(
    sandbox: Sandbox,
    port: int,
    *,
    ttl: float = DEFAULT_TTL_SECONDS,
    base: str | None = None,
    now: float | None = None,
) -> str:
    """A signed URL to 127.0.0.1:`port` inside `sandbox`, valid for `ttl` seconds."""
    port = checked_port(port)
    ttl = checked_ttl(ttl, MAX_TTL_SECONDS)
    core = sandbox._client._core
    key_id, key = read_key_ring(core).signing_key()
    uid = str(sandbox._body["metadata"]["uid"])
    expires = int((time.time() if now is None else now) + ttl)
    token = sign(Grant(sandbox.namespace, sandbox.name, uid, port, expires), key_id, key)
    return f"{(base or base_url(core)).rstrip('/')}/p/{token}/"
