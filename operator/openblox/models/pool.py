"""Warm pools: how many ready pods an admin keeps for a profile in the namespaces it serves.

The ConfigMap `openblox-pools` in openblox-system holds one key per pool; its value is a
YAML document: `profile` (a profile name), `namespaces` (a list of namespace names; a pod
cannot move between namespaces, so a pool keeps `size` pods in each) and `size` (a whole
number, 0 or more). Only admins write that ConfigMap; nothing a tenant or a Sandbox
writes can ask for a pool or change one.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from openblox.models.configmap_keys import parse_each_key
from openblox.names import POOLS_CONFIGMAP, PROFILES_CONFIGMAP, Reason

# Bounds one pool's pods in one namespace, so a typo (50000) cannot flood a node.
MAX_POOL_SIZE = 200
_FIELDS = ("profile", "namespaces", "size")


class PoolError(Exception):
    """A pool key the admin has to fix; its message says what and where."""

    reason = Reason.POOL_REFUSED

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f'pool "{name}" in ConfigMap {POOLS_CONFIGMAP} is refused: {message}')
        self.pool_name = name

    @property
    def message(self) -> str:
        return str(self)


@dataclass(frozen=True)
class Pool:
    name: str
    profile: str
    namespaces: tuple[str, ...]
    size: int


def _is_dns_label(text: str) -> bool:
    return (
        0 < len(text) <= 63
        and text[0].isalnum()
        and text[-1].isalnum()
        and all(c.islower() or c.isdigit() or c == "-" for c in text)
    )


def parse_pool(name: str, raw_yaml: str) -> Pool:
    if not _is_dns_label(name):
        raise PoolError(name, "the key must be a DNS label (lower-case letters, digits, '-')")
    try:
        document: Any = yaml.safe_load(raw_yaml)
    except yaml.YAMLError as error:
        raise PoolError(name, f"not valid YAML ({error.__class__.__name__})") from None
    if not isinstance(document, dict):
        raise PoolError(name, "expected a mapping with profile, namespaces and size")
    unknown = sorted(str(key) for key in document if key not in _FIELDS)
    if unknown:
        raise PoolError(
            name, f"unknown field(s) {', '.join(unknown)} (known: profile, namespaces, size)"
        )
    profile = document.get("profile")
    if not isinstance(profile, str) or not profile:
        raise PoolError(name, f"profile must name a profile of {PROFILES_CONFIGMAP}")
    namespaces = document.get("namespaces")
    if (
        not isinstance(namespaces, list)
        or not namespaces
        or not all(isinstance(n, str) and _is_dns_label(n) for n in namespaces)
    ):
        raise PoolError(name, "namespaces must be a non-empty list of namespace names")
    size = document.get("size")
    # bool is an int in Python; `size: yes` is not a number of pods.
    if not isinstance(size, int) or isinstance(size, bool):
        raise PoolError(name, f"size must be a whole number of pods, not {size!r}")
    if size < 0:
        raise PoolError(name, f"size must be 0 or more, not {size}")
    if size > MAX_POOL_SIZE:
        raise PoolError(
            name, f"size {size} is above the limit of {MAX_POOL_SIZE} pods per namespace"
        )
    return Pool(name, profile, tuple(dict.fromkeys(namespaces)), size)


def parse_pools(data: Mapping[str, str]) -> tuple[dict[str, Pool], dict[str, PoolError]]:
    """Every key of the pools ConfigMap; a broken key never hides the others."""
    return parse_each_key(data, parse_pool, PoolError)
