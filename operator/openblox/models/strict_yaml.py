"""YAML as admins write it, read strictly: safe types only, and a duplicate key is an error
instead of silently keeping the last value."""

from typing import Any

import yaml


class InvalidYAML(ValueError):
    """The text is not YAML, or repeats a key; the message says what and where."""


class _StrictLoader(yaml.SafeLoader):
    """A SafeLoader that rejects duplicate keys instead of silently keeping the last one."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[object] = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue  # keys merged in with << may legitimately be overridden
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = key in seen
        except TypeError:
            raise yaml.constructor.ConstructorError(
                None, None, "mapping keys must be plain scalars", key_node.start_mark
            ) from None
        if duplicate:
            raise yaml.constructor.ConstructorError(
                None, None, f'duplicate key "{key}"', key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=True)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_strict_yaml(raw_yaml: str) -> object:
    """One YAML document, safely loaded; InvalidYAML says what is wrong and where."""
    try:
        return yaml.load(raw_yaml, Loader=_StrictLoader)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise InvalidYAML(f"invalid YAML{where}: {error.problem}") from None
    except yaml.YAMLError as error:
        raise InvalidYAML(f"invalid YAML: {error}") from None
