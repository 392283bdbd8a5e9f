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
from collections.abc import Mapping

from openblox.client.arguments import checked_port, checked_ttl
from openblox.client.cluster import SYSTEM_NAMESPACE, read_config_map, read_secret
from openblox.client.effects import Plan
from openblox.client.errors import OpenbloxClientError
from openblox.preview.keys import SECRET_NAME, KeyRing, KeyRingError
from openblox.preview.tokens import MAX_TTL_SECONDS, Grant, sign
from openblox.transport.errors import ApiError

CONFIG_MAP = "openblox-preview"
PREVIEW_SERVICE = "openblox-preview"  # the proxy's Service (manifests/preview.yaml)
DEFAULT_BASE_URL = f"http://{PREVIEW_SERVICE}.{SYSTEM_NAMESPACE}.svc"
DEFAULT_TTL_SECONDS = 3600


class PreviewUnavailable(OpenbloxClientError):
    """No key to sign with: the Secret is missing, unreadable to this caller, or invalid."""


def read_key_ring() -> Plan[KeyRing]:
    try:
        data = yield from read_secret(SECRET_NAME, SYSTEM_NAMESPACE)
    except ApiError as error:
        raise secret_unreadable(error.status) from error
    return key_ring(data)


def secret_unreadable(status: int) -> PreviewUnavailable:
    return PreviewUnavailable(
        f"cannot read the preview key Secret {SYSTEM_NAMESPACE}/{SECRET_NAME} "
        f"({status}); minting links needs the openblox-preview-signer Role"
    )


def key_ring(data: Mapping[str, str]) -> KeyRing:
    """The key ring in the Secret's `data` (base64 values)."""
    entries = {name: base64.b64decode(value) for name, value in data.items()}
    try:
        return KeyRing.from_mapping(entries)
    except KeyRingError as error:
        raise PreviewUnavailable(f"the preview key Secret is not usable: {error}") from error


def base_url() -> Plan[str]:
    try:
        data = yield from read_config_map(CONFIG_MAP, SYSTEM_NAMESPACE)
    except ApiError:
        return DEFAULT_BASE_URL
    return str(data.get("baseURL") or DEFAULT_BASE_URL)


def preview_url(
    namespace: str,
    name: str,
    uid: str,
    port: int,
    *,
    ttl: float = DEFAULT_TTL_SECONDS,
    base: str | None = None,
    now: float | None = None,
) -> Plan[str]:
    """A signed URL to 127.0.0.1:`port` inside the Sandbox `uid`, valid for `ttl` seconds."""
    port = checked_port(port)
    ttl = checked_ttl(ttl, MAX_TTL_SECONDS)
    ring = yield from read_key_ring()
    grant = Grant(namespace, name, uid, port, expiry(ttl, now))
    return signed_url(grant, ring, base or (yield from base_url()))


def expiry(ttl: float, now: float | None = None) -> int:
    """When a link made now, valid `ttl` seconds, expires (Unix seconds)."""
    return int((time.time() if now is None else now) + ttl)


def signed_url(grant: Grant, ring: KeyRing, base: str) -> str:
    """The link for `grant`, signed with the ring's current key, under `base`."""
    key_id, key = ring.signing_key()
    return f"{base.rstrip('/')}/p/{sign(grant, key_id, key)}/"
