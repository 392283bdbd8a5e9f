"""A ConfigMap that holds one document per key (profiles, pools), parsed key by key."""

from collections.abc import Callable, Mapping
from typing import TypeVar

_T = TypeVar("_T")
_E = TypeVar("_E", bound=Exception)


def parse_each_key(
    data: Mapping[str, str], parse: Callable[[str, str], _T], refused: type[_E]
) -> tuple[dict[str, _T], dict[str, _E]]:
    """``parse(key, text)`` of every key: those parsed, and those `refused` with the error,
    so a broken key never hides the others."""
    parsed: dict[str, _T] = {}
    broken: dict[str, _E] = {}
    for name, raw_yaml in data.items():
        try:
            parsed[name] = parse(name, raw_yaml)
        except refused as error:
            broken[name] = error
    return parsed, broken
