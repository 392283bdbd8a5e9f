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

from openblox.client.arguments import checked_port, checked_ttl
from openblox.client.cluster import SYSTEM_NAMESPACE, Cluster
from openblox.client.errors import OpenbloxClientError
from openblox.preview.keys import SECRET_NAME, KeyRing, KeyRingError
from openblox.preview.tokens import MAX_TTL_SECONDS, Grant, sign
from openblox.transport import ApiError

CONFIG_MAP = "openblox-preview"
DEFAULT_BASE_URL = "http://openblox-preview.openblox-system.svc"
DEFAULT_TTL_SECONDS = 3600


class PreviewUnavailable(OpenbloxClientError):
    """No key to sign with: the Secret is missing, unreadable to this caller, or invalid."""


def read_key_ring(cluster: Cluster) -> KeyRing:
    try:
        data = cluster.read_secret(SECRET_NAME, SYSTEM_NAMESPACE)
    except ApiError as error:
        raise PreviewUnavailable(
            f"cannot read the preview key Secret {SYSTEM_NAMESPACE}/{SECRET_NAME} "
            f"({error.status}); minting links needs the openblox-preview-signer Role"
        ) from error
    entries = {name: base64.b64decode(value) for name, value in data.items()}
    try:
        return KeyRing.from_mapping(entries)
    except KeyRingError as error:
        raise PreviewUnavailable(f"the preview key Secret is not usable: {error}") from error


def base_url(cluster: Cluster) -> str:
    try:
        data = cluster.read_config_map(CONFIG_MAP, SYSTEM_NAMESPACE)
    except ApiError:
        return DEFAULT_BASE_URL
    return str(data.get("baseURL") or DEFAULT_BASE_URL)


def preview_url(
    cluster: Cluster,
    namespace: str,
    name: str,
    uid: str,
    port: int,
    *,
    ttl: float = DEFAULT_TTL_SECONDS,
    base: str | None = None,
    now: float | None = None,
) -> str:
    """A signed URL to 127.0.0.1:`port` inside the Sandbox `uid`, valid for `ttl` seconds."""
    port = checked_port(port)
    ttl = checked_ttl(ttl, MAX_TTL_SECONDS)
    key_id, key = read_key_ring(cluster).signing_key()
    expires = int((time.time() if now is None else now) + ttl)
    token = sign(Grant(namespace, name, uid, port, expires), key_id, key)
    return f"{(base or base_url(cluster)).rstrip('/')}/p/{token}/"
