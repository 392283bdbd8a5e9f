"""Parsing a profile's YAML document: strict YAML (no duplicate keys), every field checked
with its path, and messages an admin can act on."""

import difflib
import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from openblox.models.configmap_keys import parse_each_key
from openblox.models.errors import ProfileError
from openblox.models.profile import (
    DEFAULT_COMMAND,
    DEFAULT_EXEC_LIMITS,
    DEFAULT_ID,
    DEFAULT_LIFETIME,
    DEFAULT_RESOURCES,
    DEFAULT_RUNTIME_CLASS,
    STATE_VOLUME_SIZE,
    AllowedNamespaces,
    ExecLimits,
    Lifetime,
    Profile,
    Resources,
)
from openblox.models.quantity import Quantity, parse_quantity
from openblox.models.strict_yaml import InvalidYAML, load_strict_yaml
from openblox.names import APPROVED_RUNTIME_CLASSES

_MAX_ID = 2**31 - 1
# Also bounds seconds, so deadlines computed from them stay within datetime's range.
_MAX_COUNT = 2**31 - 1
_MAX_QUANTITY = 2**63 - 1

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(
    r"(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
)


_IMAGE_DIGEST = re.compile(r"sha256:[a-f0-9]{64}")
# The distribution reference grammar: an optional registry host (with port), a lowercase
# path of components, an optional tag.
_IMAGE_NAME = re.compile(
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*"
    r"(?::[0-9]+)?/)?"
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
)


class _Invalid(Exception):
    """One thing wrong with a profile document; parse_profile adds the profile's name."""


def _load_yaml(raw_yaml: str) -> object:
    try:
        return load_strict_yaml(raw_yaml)
    except InvalidYAML as error:
        raise _Invalid(str(error)) from None


def _describe(value: object) -> str:
    """Names a YAML value's type the way the admin wrote it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"number {value}"
    if isinstance(value, str):
        return f'string "{value}"'
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


class _Section:
    """One YAML mapping in a profile, read field by field with its path for messages."""

    def __init__(self, value: object, path: str, known: tuple[str, ...]) -> None:
        if not isinstance(value, Mapping):
            what = path or "a profile"
            raise _Invalid(f"{what} must be a mapping, got {_describe(value)}")
        for key in value:
            if key not in known:
                raise _Invalid(_unknown_field(key, path, known))
        self._values: Mapping[Any, object] = value
        self._path = path

    def path(self, key: str) -> str:
        return f"{self._path}.{key}" if self._path else key

    def get(self, key: str) -> object:
        return self._values.get(key)

    def has(self, key: str) -> bool:
        return key in self._values

    def section(self, key: str, known: tuple[str, ...]) -> "_Section | None":
        if not self.has(key):
            return None
        return _Section(self.get(key), self.path(key), known)

    def string(self, key: str, default: str) -> str:
        if not self.has(key):
            return default
        value = self.get(key)
        if not isinstance(value, str) or not value:
            raise _Invalid(f"{self.path(key)} must be a non-empty string, got {_describe(value)}")
        return value

    def boolean(self, key: str, default: bool) -> bool:
        if not self.has(key):
            return default
        value = self.get(key)
        if not isinstance(value, bool):
            raise _Invalid(f"{self.path(key)} must be true or false, got {_describe(value)}")
        return value

    def integer(self, key: str, default: int, *, maximum: int = _MAX_COUNT) -> int:
        """A whole number from 1 to maximum; zero and negatives are never meaningful here."""
        if not self.has(key):
            return default
        value = self.get(key)
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Invalid(f"{self.path(key)} must be a whole number, got {_describe(value)}")
        if not 1 <= value <= maximum:
            raise _Invalid(f"{self.path(key)} must be between 1 and {maximum}, got {value}")
        return value

    def bytes_quantity(self, key: str, default: Quantity) -> Quantity:
        if not self.has(key):
            return default
        text, amount = self._quantity(key)
        if amount.denominator != 1:
            hint = ' ("m" means thousandths; did you mean "Mi"?)' if text.endswith("m") else ""
            raise _Invalid(f"{self.path(key)} {text} is not a whole number of bytes{hint}")
        return Quantity(text, int(amount))

    def millicores_quantity(self, key: str, default: Quantity) -> Quantity:
        if not self.has(key):
            return default
        text, amount = self._quantity(key)
        millicores = amount * 1000
        if millicores.denominator != 1:
            raise _Invalid(f"{self.path(key)} {text} is finer than one millicore (1m)")
        return Quantity(text, int(millicores))

    def _quantity(self, key: str) -> tuple[str, Fraction]:
        value = self.get(key)
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise _Invalid(
                f"{self.path(key)} must be a quantity such as 512Mi, got {_describe(value)}"
            )
        text = value if isinstance(value, str) else str(value)
        try:
            amount = parse_quantity(text)
        except ValueError as error:
            raise _Invalid(f"{self.path(key)}: {error}") from None
        if amount <= 0:
            raise _Invalid(f"{self.path(key)} must be greater than zero, got {text}")
        if amount > _MAX_QUANTITY:
            raise _Invalid(f"{self.path(key)} {text} is too large")
        return text, amount


def _unknown_field(key: object, path: str, known: tuple[str, ...]) -> str:
    full = f"{path}.{key}" if path else str(key)
    message = f'unknown field "{full}"'
    if isinstance(key, str) and (close := difflib.get_close_matches(key, known, n=1)):
        message += f'; did you mean "{close[0]}"?'
    where = f" in {path}" if path else ""
    return f"{message} (known fields{where}: {', '.join(known)})"


_PROFILE_FIELDS = (
    "image",
    "runtimeClassName",
    "unsafe",
    "command",
    "user",
    "group",
    "resources",
    "exec",
    "lifetime",
    "namespaces",
)
_RESOURCES_FIELDS = ("cpu", "cpuRequest", "memory", "scratch", "processes", "ephemeralStorage")
_EXEC_FIELDS = ("timeoutSeconds", "outputBytes")
_LIFETIME_FIELDS = ("idleTimeoutSeconds", "maxAgeSeconds")
_NAMESPACES_FIELDS = ("names", "selector")
_SELECTOR_FIELDS = ("matchLabels",)


def parse_profile(name: str, raw_yaml: str) -> Profile:
    """Parses and validates one profile, raising ProfileError with a message an admin can act on."""
    try:
        return _parse_profile(name, raw_yaml)
    except _Invalid as invalid:
        raise ProfileError(name, str(invalid)) from None


def parse_profiles(data: Mapping[str, str]) -> tuple[dict[str, Profile], dict[str, ProfileError]]:
    """Parses every key of the profiles ConfigMap; a broken profile never hides the others."""
    return parse_each_key(data, parse_profile, ProfileError)


def _parse_profile(name: str, raw_yaml: str) -> Profile:
    if not _DNS_LABEL.fullmatch(name):
        raise _Invalid(
            "its name (the ConfigMap key) must be a DNS label: at most 63 lowercase letters, "
            "digits and '-', starting and ending with a letter or digit"
        )
    if not isinstance(raw_yaml, str):
        raise _Invalid(f"its value must be a YAML string, got {type(raw_yaml).__name__}")
    document = _Section(_load_yaml(raw_yaml), "", _PROFILE_FIELDS)
    if not document.has("image"):
        raise _Invalid(
            "image is required: the container image to run, pinned by digest "
            "(registry/name@sha256:...)"
        )
    return Profile(
        name=name,
        image=_image(document),
        runtime_class_name=_runtime_class_name(document),
        unsafe=document.boolean("unsafe", default=False),
        command=_command(document),
        user=document.integer("user", DEFAULT_ID, maximum=_MAX_ID),
        group=document.integer("group", DEFAULT_ID, maximum=_MAX_ID),
        resources=_resources(document.section("resources", _RESOURCES_FIELDS)),
        exec=_exec_limits(document.section("exec", _EXEC_FIELDS)),
        lifetime=_lifetime(document.section("lifetime", _LIFETIME_FIELDS)),
        namespaces=_allowed_namespaces(document.section("namespaces", _NAMESPACES_FIELDS)),
    )


def _image(document: _Section) -> str:
    image = document.string("image", default="")
    if any(character.isspace() for character in image):
        raise _Invalid(f'image "{image}" must not contain whitespace')
    name, at, digest = image.rpartition("@")
    if not at:
        # A tag can be moved to other content after the admin reviewed it; a digest cannot.
        raise _Invalid(
            f'image "{image}" is not pinned by digest: name it as {image}@sha256:<digest>, '
            "with the digest the registry gives for the image you reviewed"
        )
    if not _IMAGE_DIGEST.fullmatch(digest):
        raise _Invalid(
            f'image "{image}" has the digest "{digest}": a digest is sha256: and 64 '
            "lowercase hexadecimal digits"
        )
    if not _IMAGE_NAME.fullmatch(name):
        raise _Invalid(
            f'image "{image}" has the name "{name}", which is not an image reference: '
            "[registry[:port]/]path[:tag], path in lowercase"
        )
    return image


def _runtime_class_name(document: _Section) -> str:
    runtime_class_name = document.string("runtimeClassName", DEFAULT_RUNTIME_CLASS)
    if not _DNS_SUBDOMAIN.fullmatch(runtime_class_name):
        raise _Invalid(f'runtimeClassName "{runtime_class_name}" is not a valid RuntimeClass name')
    if runtime_class_name not in APPROVED_RUNTIME_CLASSES and not document.boolean(
        "unsafe", default=False
    ):
        approved = ", ".join(APPROVED_RUNTIME_CLASSES)
        raise _Invalid(
            f'runtimeClassName "{runtime_class_name}" is not approved for untrusted code '
            f"(approved: {approved}); set unsafe: true only if you accept a weaker boundary"
        )
    return runtime_class_name


def _command(document: _Section) -> tuple[str, ...]:
    if not document.has("command"):
        return DEFAULT_COMMAND
    command = document.get("command")
    if (
        not isinstance(command, list)
        or not command
        or not all(isinstance(argument, str) for argument in command)
        or not command[0]
    ):
        raise _Invalid(
            "command must be a non-empty list of strings starting with the program, "
            f"got {_describe(command)}"
        )
    return tuple(command)


def _resources(section: _Section | None) -> Resources:
    if section is None:
        return DEFAULT_RESOURCES
    cpu = section.millicores_quantity("cpu", DEFAULT_RESOURCES.cpu)
    resources = Resources(
        cpu=cpu,
        cpu_request=_cpu_request(section, cpu),
        memory=section.bytes_quantity("memory", DEFAULT_RESOURCES.memory),
        scratch=section.bytes_quantity("scratch", DEFAULT_RESOURCES.scratch),
        ephemeral_storage=section.bytes_quantity(
            "ephemeralStorage", DEFAULT_RESOURCES.ephemeral_storage
        ),
        processes=section.integer("processes", DEFAULT_RESOURCES.processes),
    )
    if resources.memory_backed_bytes >= resources.memory.value:
        scratch, memory = resources.scratch.text, resources.memory.text
        raise _Invalid(
            f"resources.scratch {scratch} does not fit in resources.memory {memory}: "
            f"/tmp and /workspace are each a tmpfs of up to {scratch}, plus "
            f"{STATE_VOLUME_SIZE.text} of state, all drawn from the memory limit, "
            f"so memory must be more than 2 x scratch + {STATE_VOLUME_SIZE.text}"
        )
    return resources


def _cpu_request(section: _Section, limit: Quantity) -> Quantity | None:
    if not section.has("cpuRequest"):
        return None
    request = section.millicores_quantity("cpuRequest", limit)
    if request.value > limit.value:
        raise _Invalid(
            f"resources.cpuRequest {request.text} is above resources.cpu {limit.text}: "
            "a request can be at most the limit (leave cpuRequest out to make them equal)"
        )
    # Written out equal to the limit is the default spelled out: one profile, one value.
    return None if request == limit else request


def _exec_limits(section: _Section | None) -> ExecLimits:
    if section is None:
        return DEFAULT_EXEC_LIMITS
    return ExecLimits(
        timeout_seconds=section.integer("timeoutSeconds", DEFAULT_EXEC_LIMITS.timeout_seconds),
        output_bytes=section.integer("outputBytes", DEFAULT_EXEC_LIMITS.output_bytes),
    )


def _lifetime(section: _Section | None) -> Lifetime:
    if section is None:
        return DEFAULT_LIFETIME
    default = DEFAULT_LIFETIME
    return Lifetime(
        idle_timeout_seconds=section.integer("idleTimeoutSeconds", default.idle_timeout_seconds),
        max_age_seconds=section.integer("maxAgeSeconds", default.max_age_seconds),
    )


def _allowed_namespaces(section: _Section | None) -> AllowedNamespaces | None:
    if section is None:
        return None
    names = _namespace_names(section)
    selector = section.section("selector", _SELECTOR_FIELDS)
    match_labels = None if selector is None else _match_labels(selector)
    if not names and match_labels is None:
        raise _Invalid(
            "namespaces must list names or a selector; remove it to allow every namespace "
            "that has opted in to sandboxes"
        )
    return AllowedNamespaces(names=names, match_labels=match_labels)


def _namespace_names(section: _Section) -> frozenset[str]:
    if not section.has("names"):
        return frozenset()
    names = section.get("names")
    if not isinstance(names, list):
        raise _Invalid(f"namespaces.names must be a list of names, got {_describe(names)}")
    for name in names:
        if not isinstance(name, str) or not _DNS_LABEL.fullmatch(name):
            raise _Invalid(f"namespaces.names: {_describe(name)} is not a namespace name")
    return frozenset(names)


def _match_labels(selector: _Section) -> tuple[tuple[str, str], ...]:
    if not selector.has("matchLabels"):
        return ()
    labels = selector.get("matchLabels")
    if not isinstance(labels, Mapping):
        raise _Invalid(f"{selector.path('matchLabels')} must be a mapping, got {_describe(labels)}")
    pairs: list[tuple[str, str]] = []
    for key, value in labels.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise _Invalid(
                f"{selector.path('matchLabels')}.{key} must be a string "
                f"(quote true, false and numbers in YAML), got {_describe(value)}"
            )
        pairs.append((key, value))
    return tuple(sorted(pairs))
