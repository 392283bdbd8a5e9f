"""Preview tokens and the key ring: pure, no cluster."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from openblox.preview.keys import KeyRing, KeyRingError, MountedKeyRing
from openblox.preview.tokens import (
    MAX_TTL_SECONDS,
    Forged,
    Grant,
    Malformed,
    TokenExpired,
    UnknownKey,
    sign,
    verify,
)

KEY = b"k" * 32
OTHER = b"o" * 32
NOW = 1_800_000_000
GRANT = Grant("team-a", "web", "0b5c-uid", 8000, NOW + 600)


def test_round_trip() -> None:
    token = sign(GRANT, "k1", KEY)
    assert verify(token, {"k1": KEY}, NOW) == GRANT
    assert all(c.isalnum() or c in "-_." for c in token)


def test_expired_at_and_after_expiry() -> None:
    token = sign(GRANT, "k1", KEY)
    with pytest.raises(TokenExpired):
        verify(token, {"k1": KEY}, NOW + 600)
    with pytest.raises(TokenExpired):
        verify(token, {"k1": KEY}, NOW + 10_000)


def test_wrong_key_is_forged() -> None:
    token = sign(GRANT, "k1", OTHER)
    with pytest.raises(Forged):
        verify(token, {"k1": KEY}, NOW)


def test_unknown_key_id() -> None:
    token = sign(GRANT, "k9", KEY)
    with pytest.raises(UnknownKey):
        verify(token, {"k1": KEY}, NOW)


def _tamper_payload(token: str, **changes: object) -> str:
    version, key_id, payload, signature = token.split(".")
    body = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    body.update(changes)
    raw = json.dumps(body, separators=(",", ":")).encode()
    new = base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
    return f"{version}.{key_id}.{new}.{signature}"


@pytest.mark.parametrize(
    "changes", [{"p": 22}, {"ns": "kube-system"}, {"sb": "other"}, {"exp": NOW + 99_999}]
)
def test_tampered_payload_is_forged(changes: dict[str, object]) -> None:
    token = _tamper_payload(sign(GRANT, "k1", KEY), **changes)
    with pytest.raises(Forged):
        verify(token, {"k1": KEY}, NOW)


def test_swapped_key_id_is_refused() -> None:
    token = sign(GRANT, "k1", KEY)
    version, _, payload, signature = token.split(".")
    with pytest.raises(Forged):
        verify(f"{version}.k2.{payload}.{signature}", {"k1": KEY, "k2": OTHER}, NOW)


def test_flipped_signature_bit_is_forged() -> None:
    token = sign(GRANT, "k1", KEY)
    head, signature = token.rsplit(".", 1)
    flipped = ("A" if signature[0] != "A" else "B") + signature[1:]
    with pytest.raises(Forged):
        verify(f"{head}.{flipped}", {"k1": KEY}, NOW)


@pytest.mark.parametrize(
    "token",
    [
        "",
        "garbage",
        "v1.k1.x",
        "v2.k1.e30.AAAA",
        "v1.K1!.e30.AAAA",
        "v1.k1.e30.not+base64",
        "v1.k1.e30." + "A" * 2000,
    ],
)
def test_malformed(token: str) -> None:
    with pytest.raises(Malformed):
        verify(token, {"k1": KEY}, NOW)


def test_validly_signed_but_bad_payload_is_malformed() -> None:
    payload = base64.urlsafe_b64encode(b'{"ns":"a"}').rstrip(b"=").decode()
    import hashlib
    import hmac

    signed = f"v1.k1.{payload}"
    mac = hmac.new(KEY, signed.encode(), hashlib.sha256).digest()
    token = f"{signed}.{base64.urlsafe_b64encode(mac).rstrip(b'=').decode()}"
    with pytest.raises(Malformed):
        verify(token, {"k1": KEY}, NOW)


def test_lifetime_beyond_the_cap_is_refused() -> None:
    token = sign(Grant("a", "b", "u", 80, NOW + MAX_TTL_SECONDS + 60), "k1", KEY)
    with pytest.raises(Malformed):
        verify(token, {"k1": KEY}, NOW)


def test_sign_refuses_weak_keys_and_bad_ports() -> None:
    with pytest.raises(ValueError):
        sign(GRANT, "k1", b"short")
    with pytest.raises(ValueError):
        sign(Grant("a", "b", "u", 0, NOW + 1), "k1", KEY)
    with pytest.raises(ValueError):
        sign(GRANT, "Bad Id", KEY)


def test_key_ring_from_mapping_and_rotation() -> None:
    ring = KeyRing.from_mapping({"current": b"k1\n", "k1": KEY + b"\n"})
    assert ring.signing_key() == ("k1", KEY)
    old = sign(GRANT, *ring.signing_key())
    rotated = KeyRing.from_mapping({"current": b"k2", "k1": KEY, "k2": OTHER})
    assert verify(old, rotated.keys, NOW) == GRANT
    assert rotated.signing_key() == ("k2", OTHER)
    retired = KeyRing.from_mapping({"current": b"k2", "k2": OTHER})
    with pytest.raises(UnknownKey):
        verify(old, retired.keys, NOW)


@pytest.mark.parametrize(
    "entries",
    [
        {"k1": KEY},
        {"current": b"k2", "k1": KEY},
        {"current": b"k1", "k1": b"short"},
        {"current": b"k1", "k1": KEY, "Bad_Id": KEY},
    ],
)
def test_key_ring_refuses_bad_secrets(entries: dict[str, bytes]) -> None:
    with pytest.raises(KeyRingError):
        KeyRing.from_mapping(entries)


def test_mounted_ring_reads_a_secret_volume_and_reloads(tmp_path: Path) -> None:
    # The kubelet's layout: ..data -> timestamped dir, and a link per entry.
    data = tmp_path / "..2026_11_30"
    data.mkdir()
    (data / "current").write_bytes(b"k1")
    (data / "k1").write_bytes(KEY)
    (tmp_path / "..data").symlink_to(data.name)
    for name in ("current", "k1"):
        (tmp_path / name).symlink_to(f"..data/{name}")
    ring = MountedKeyRing(tmp_path, reload_seconds=0)
    assert ring.get().current == "k1"
    (data / "k2").write_bytes(OTHER)
    (tmp_path / "k2").symlink_to("..data/k2")
    (data / "current").write_bytes(b"k2")
    assert ring.get().signing_key() == ("k2", OTHER)
    (data / "current").write_bytes(b"missing")  # a half-done edit keeps the last good ring
    assert ring.get().current == "k2"
