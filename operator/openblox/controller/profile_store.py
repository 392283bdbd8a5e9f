"""The profiles the operator serves, kept from the admins' ConfigMap.

A broken key never takes a working profile away: the last good version of a profile
stays in service until a good one replaces it, and the other keys are unaffected.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass

from openblox.models import Profile, parse_profiles
from openblox.models.errors import ProfileError


@dataclass(frozen=True)
class ProfileUpdate:
    """What one ConfigMap revision did: which profiles changed and which keys it refused."""

    changed: tuple[str, ...]
    removed: tuple[str, ...]
    refused: Mapping[str, ProfileError]
    kept_last_good: tuple[str, ...]


class ProfileStore:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._profiles: dict[str, Profile] = {}
        self._refused: dict[str, ProfileError] = {}
        self._loaded = threading.Event()

    def update(self, data: Mapping[str, str]) -> ProfileUpdate:
        good, broken = parse_profiles(data)
        with self._lock:
            previous = self._profiles
            current = dict(good)
            kept = []
            for name in broken:
                if name in previous:
                    current[name] = previous[name]
                    kept.append(name)
            changed = tuple(
                sorted(n for n, p in good.items() if n not in previous or previous[n] != p)
            )
            removed = tuple(sorted(set(previous) - set(current)))
            self._profiles = current
            self._refused = dict(broken)
        self._loaded.set()
        return ProfileUpdate(changed, removed, dict(broken), tuple(sorted(kept)))

    def loaded(self) -> bool:
        return self._loaded.is_set()

    def wait_loaded(self, timeout: float) -> bool:
        return self._loaded.wait(timeout)

    def get(self, name: str) -> Profile | None:
        with self._lock:
            return self._profiles.get(name)

    def refusal(self, name: str) -> ProfileError | None:
        with self._lock:
            return self._refused.get(name)

    def names(self) -> tuple[str, ...]:
        with self._lock:
            return tuple(sorted(self._profiles))

    def snapshot(self) -> dict[str, Profile]:
        with self._lock:
            return dict(self._profiles)
