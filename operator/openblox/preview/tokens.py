"""Preview tokens: HMAC-SHA256 over who may be reached, until when. Pure: no I/O, no clock.

A token is four dot-separated fields, all URL-safe, so it sits in a path segment as is:

    v1.<key id>.<payload>.<signature>

`payload` is base64url (no padding) of compact JSON
`{"ns": namespace, "sb": sandbox, "uid": sandbox uid, "p": port, "exp": unix seconds}`;
`signature` is base64url of HMAC-SHA256(key, "v1.<key id>.<payload>"). The key id is in
clear so the verifier can pick the key; it is covered by the MAC, so it cannot be swapped.
The payload is parsed only after the MAC checks out: untrusted JSON is never decoded.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

VERSION = "v1"
KEY_ID = re.compile(r"^[a-z0-9][a-z0-9-]{0,31}$")
MIN_KEY_BYTES = 32
MAX_TOKEN_CHARS = 1024
# A token may not be minted for longer than this; the proxy refuses longer ones too.
MAX_TTL_SECONDS = 7 * 24 * 3600
_B64 = re.compile(r"^[A-Za-z0-9_-]+$")


class TokenError(Exception):
    """A token the proxy refuses. `reason` is short and safe to show to anyone."""

    reason = "invalid"


class Malformed(TokenError):
    reason = "malformed"


class UnknownKey(TokenError):
    reason = "unknown-key"


class Forged(TokenError):
    reason = "forged"


class TokenExpired(TokenError):
    reason = "expired"


@dataclass(frozen=True)
class Grant:
    """What a valid token lets its bearer reach: one loopback port of one sandbox."""

    namespace: str
    sandbox: str
    uid: str
    port: int
    expires: int


def _b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64decode(text: str) -> bytes:
    if not _B64.match(text):
        raise Malformed("not base64url")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as error:
        raise Malformed("not base64url") from error


def _mac(key: bytes, signed: str) -> bytes:
    return hmac.new(key, signed.encode("ascii"), hashlib.sha256).digest()


def _check_key(key_id: str, key: bytes) -> None:
    if not KEY_ID.match(key_id):
        raise ValueError(f"key id {key_id!r} must match {KEY_ID.pattern}")
    if len(key) < MIN_KEY_BYTES:
        raise ValueError(f"key {key_id!r} is shorter than {MIN_KEY_BYTES} bytes")


def sign(grant: Grant, key_id: str, key: bytes) -> str:
    """The token for `grant`, signed with `key` under `key_id`."""
    _check_key(key_id, key)
    if not 1 <= grant.port <= 65535:
        raise ValueError(f"port {grant.port} is not in 1..65535")
    body = {
        "ns": grant.namespace,
        "sb": grant.sandbox,
        "uid": grant.uid,
        "p": grant.port,
        "exp": int(grant.expires),
    }
    payload = _b64encode(json.dumps(body, separators=(",", ":"), sort_keys=True).encode())
    signed = f"{VERSION}.{key_id}.{payload}"
    token = f"{signed}.{_b64encode(_mac(key, signed))}"
    if len(token) > MAX_TOKEN_CHARS:
        raise ValueError("the names are too long for a preview token")
    return token


def verify(
    token: str, keys: Mapping[str, bytes], now: float, max_ttl: int = MAX_TTL_SECONDS
) -> Grant:
    """The grant a token carries, or the TokenError that says why it is refused.

    Order: shape, key id, MAC (constant-time), then payload, then expiry.
    """
    if len(token) > MAX_TOKEN_CHARS:
        raise Malformed("too long")
    parts = token.split(".")
    if len(parts) != 4 or parts[0] != VERSION:
        raise Malformed("not a v1 token")
    _, key_id, payload, signature = parts
    if not KEY_ID.match(key_id):
        raise Malformed("bad key id")
    given = _b64decode(signature)
    key = keys.get(key_id)
    if key is None:
        raise UnknownKey(f"no key {key_id!r}")
    if not hmac.compare_digest(given, _mac(key, f"{VERSION}.{key_id}.{payload}")):
        raise Forged("bad signature")
    try:
        body = json.loads(_b64decode(payload))
        grant = Grant(
            namespace=body["ns"],
            sandbox=body["sb"],
            uid=body["uid"],
            port=body["p"],
            expires=body["exp"],
        )
    except (ValueError, KeyError, TypeError) as error:
        raise Malformed("bad payload") from error
    if not (
        all(isinstance(v, str) and v for v in (grant.namespace, grant.sandbox, grant.uid))
        and all(type(v) is int for v in (grant.port, grant.expires))
        and 1 <= grant.port <= 65535
    ):
        raise Malformed("bad payload")
    if grant.expires <= now:
        raise TokenExpired("expired")
    if grant.expires > now + max_ttl:
        raise Malformed("lifetime longer than the proxy allows")
    return grant
