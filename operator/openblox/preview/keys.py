"""The preview key ring: keys by id, and which one signs new links.

Stored in the Secret `openblox-preview-keys` (namespace openblox-system): one entry per key
id holding the key (at least 32 bytes; the text as written is the key), and an entry
`current` naming the key id that signs. The proxy mounts the Secret as a directory and
re-reads it every few seconds, so rotation needs no restart:

1. add a key under a new id (links signed with it verify everywhere once it is mounted);
2. point `current` at it (new links are signed with it; old links still verify);
3. when the old links should die (or have expired), delete the old key.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from openblox.preview.tokens import KEY_ID, MIN_KEY_BYTES

SECRET_NAME = "openblox-preview-keys"
CURRENT = "current"
RELOAD_SECONDS = 2.0

log = logging.getLogger(__name__)


class KeyRingError(ValueError):
    """The Secret does not hold a usable key ring."""


@dataclass(frozen=True)
class KeyRing:
    keys: Mapping[str, bytes] = field(default_factory=dict)
    current: str = ""

    @classmethod
    def from_mapping(cls, entries: Mapping[str, bytes]) -> KeyRing:
        """A ring from the Secret's entries (already base64-decoded)."""
        if CURRENT not in entries:
            raise KeyRingError(f"no {CURRENT!r} entry naming the signing key")
        current = entries[CURRENT].decode("ascii", "replace").strip()
        keys: dict[str, bytes] = {}
        for name, value in entries.items():
            if name == CURRENT:
                continue
            if not KEY_ID.match(name):
                raise KeyRingError(f"key id {name!r} must match {KEY_ID.pattern}")
            key = value.strip()
            if len(key) < MIN_KEY_BYTES:
                raise KeyRingError(f"key {name!r} is shorter than {MIN_KEY_BYTES} bytes")
            keys[name] = key
        if current not in keys:
            raise KeyRingError(f"{CURRENT!r} names {current!r}, which is not in the ring")
        return cls(keys, current)

    @classmethod
    def from_directory(cls, directory: Path) -> KeyRing:
        """A ring from a mounted Secret: one file per entry (the kubelet's `..` links skipped)."""
        entries = {
            path.name: path.read_bytes()
            for path in sorted(directory.iterdir())
            if not path.name.startswith(".") and path.is_file()
        }
        return cls.from_mapping(entries)

    def signing_key(self) -> tuple[str, bytes]:
        return self.current, self.keys[self.current]


class MountedKeyRing:
    """The ring in a mounted Secret directory, re-read at most every RELOAD_SECONDS.

    A reload that fails (an edit half-done by hand) keeps the last good ring.
    """

    def __init__(self, directory: Path, reload_seconds: float = RELOAD_SECONDS) -> None:
        self._directory = directory
        self._reload_seconds = reload_seconds
        self._lock = threading.Lock()
        self._ring = KeyRing.from_directory(directory)
        self._loaded = time.monotonic()

    def get(self) -> KeyRing:
        with self._lock:
            if time.monotonic() - self._loaded >= self._reload_seconds:
                self._loaded = time.monotonic()
                try:
                    ring = KeyRing.from_directory(self._directory)
                except (OSError, KeyRingError) as error:
                    log.warning("keeping the last good key ring: %s", error)
                else:
                    if ring.keys.keys() != self._ring.keys.keys():
                        log.info("key ring now holds %s", sorted(ring.keys))
                    self._ring = ring
            return self._ring
