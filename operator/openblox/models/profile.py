"""Profiles: what an admin allows a Sandbox to be, parsed once from the openblox-profiles ConfigMap.

Each ConfigMap key is a profile name and its value is a YAML document. Every field but
``image`` has a default, and each default is the most restrictive sensible value.
"""

import difflib
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any, Literal

import yaml

from openblox.models.errors import ProfileError, ProfileNotAllowed, ProfileNotFound
from openblox.names import APPROVED_RUNTIME_CLASSES, LABEL_NAMESPACE_OPT_IN, NAMESPACE_OPT_IN_VALUE

Boundary = Literal["gvisor", "kata", "none"]
"""The isolation boundary around a sandbox: a user-space kernel, a guest kernel, or none."""

_MI = 1024**2
_MAX_ID = 2**31 - 1
# Also bounds seconds, so deadlines computed from them stay within datetime's range.
_MAX_COUNT = 2**31 - 1
_MAX_QUANTITY = 2**63 - 1

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(
    r"(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
)


# --- Kubernetes quantities ----------------------------------------------------------------

_QUANTITY = re.compile(
    r"(?P<number>[+-]?(?:\d+(?:\.\d*)?|\.\d+))"
    # The exponent form comes first so that "1E3" is 1000 while a bare "1E" is one exa.
    r"(?P<suffix>[eE][+-]?\d+|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?"
)
_SUFFIX_MULTIPLIERS: Mapping[str, Fraction] = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}
# Kubernetes quantities fit in int64, so larger exponents are only ever typos (or attacks
# on the parser: 1e999999999 would take minutes to expand).
_MAX_EXPONENT = 18


def parse_quantity(text: str) -> Fraction:
    """The exact value of a Kubernetes quantity such as ``500m``, ``1.5``, ``512Mi`` or ``1e3``.

    Raises ValueError naming the text when it is not a quantity.
    """
    match = _QUANTITY.fullmatch(text)
    if match is None:
        raise ValueError(f'"{text}" is not a Kubernetes quantity (for example 500m, 2, 512Mi, 1Gi)')
    number = Fraction(Decimal(match["number"]))
    suffix = match["suffix"] or ""
    if suffix in _SUFFIX_MULTIPLIERS:
        return number * _SUFFIX_MULTIPLIERS[suffix]
    exponent = int(suffix[1:])
    if abs(exponent) > _MAX_EXPONENT:
        raise ValueError(f'"{text}" is out of range for a Kubernetes quantity')
    return number * Fraction(10) ** exponent


@dataclass(frozen=True, slots=True)
class Quantity:
    """A quantity as the admin wrote it (used verbatim in the pod) and its integer value."""

    text: str
    value: int


# --- The profile model --------------------------------------------------------------------

# The state volume is fixed by the pod layout; profiles size only /tmp and /workspace.
STATE_VOLUME_SIZE = Quantity("16Mi", 16 * _MI)

DEFAULT_COMMAND = ("/usr/bin/tini", "-s", "--", "/bin/sleep", "infinity")
_DEFAULT_RUNTIME_CLASS = "gvisor"
_DEFAULT_ID = 1000
_DEFAULT_CPU = Quantity("1", 1000)
_DEFAULT_MEMORY = Quantity("512Mi", 512 * _MI)
_DEFAULT_SCRATCH = Quantity("128Mi", 128 * _MI)
_DEFAULT_EPHEMERAL_STORAGE = Quantity("64Mi", 64 * _MI)


@dataclass(frozen=True, slots=True)
class Resources:
    cpu: Quantity = _DEFAULT_CPU
    """CPU limit, value in millicores: the CFS quota the sandbox can never exceed."""
    cpu_request: Quantity | None = None
    """CPU the scheduler reserves, at most the limit; None means equal to it (Guaranteed)."""
    memory: Quantity = _DEFAULT_MEMORY
    """Memory limit in bytes; the memory-backed scratch volumes are drawn from it."""
    scratch: Quantity = _DEFAULT_SCRATCH
    """Size of each of the /tmp and /workspace tmpfs volumes, in bytes."""
    ephemeral_storage: Quantity = _DEFAULT_EPHEMERAL_STORAGE
    """Node disk for the container's logs and writable layer, in bytes."""
    processes: int = 256
    """Most processes (threads included) the sandbox may run at once."""

    @property
    def effective_cpu_request(self) -> Quantity:
        """The CPU request the pod carries: below the limit makes the pod Burstable."""
        return self.cpu if self.cpu_request is None else self.cpu_request

    @property
    def memory_backed_bytes(self) -> int:
        """Bytes the tmpfs volumes may take from the memory limit when full."""
        return 2 * self.scratch.value + STATE_VOLUME_SIZE.value


@dataclass(frozen=True, slots=True)
class ExecLimits:
    timeout_seconds: int = 60
    """A command still running after this long is killed."""
    output_bytes: int = 1024 * 1024
    """Captured stdout and stderr together are cut off after this many bytes."""


@dataclass(frozen=True, slots=True)
class Lifetime:
    idle_timeout_seconds: int = 900
    """A sandbox with no activity for this long is deleted."""
    max_age_seconds: int = 3600
    """A sandbox is deleted this long after creation, however busy it is."""


@dataclass(frozen=True, slots=True)
class AllowedNamespaces:
    """Where a profile may be used: namespaces named here, or whose labels match."""

    names: frozenset[str] = frozenset()
    match_labels: tuple[tuple[str, str], ...] | None = None
    """None means no selector; an empty selector matches every namespace, as in Kubernetes."""

    def allows(self, namespace_name: str, namespace_labels: Mapping[str, str]) -> bool:
        if namespace_name in self.names:
            return True
        if self.match_labels is None:
            return False
        return all(namespace_labels.get(key) == value for key, value in self.match_labels)

    def to_dict(self) -> dict[str, Any]:
        document: dict[str, Any] = {}
        if self.names:
            document["names"] = sorted(self.names)
        if self.match_labels is not None:
            document["selector"] = {"matchLabels": dict(self.match_labels)}
        return document


_DEFAULT_RESOURCES = Resources()
_DEFAULT_EXEC_LIMITS = ExecLimits()
_DEFAULT_LIFETIME = Lifetime()


@dataclass(frozen=True, slots=True)
class Profile:
    """A validated profile. Build one with parse_profile; the constructor does not validate."""

    name: str
    image: str
    runtime_class_name: str = _DEFAULT_RUNTIME_CLASS
    unsafe: bool = False
    command: tuple[str, ...] = DEFAULT_COMMAND
    user: int = _DEFAULT_ID
    group: int = _DEFAULT_ID
    resources: Resources = _DEFAULT_RESOURCES
    exec: ExecLimits = _DEFAULT_EXEC_LIMITS
    lifetime: Lifetime = _DEFAULT_LIFETIME
    namespaces: AllowedNamespaces | None = None
    """None means every namespace that has opted in to sandboxes."""

    @property
    def expected_boundary(self) -> Boundary | None:
        """The boundary this profile claims; None for an unsafe profile's unapproved runtime."""
        if self.runtime_class_name == "gvisor":
            return "gvisor"
        if self.runtime_class_name == "kata":
            return "kata"
        return None

    @property
    def digest(self) -> str:
        """Identifies the profile's content, so pods built from an older version stand out."""
        canonical = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    def allows_namespace(self, namespace_name: str, namespace_labels: Mapping[str, str]) -> bool:
        """Whether this profile may be used in the namespace (opt-in is checked separately)."""
        return self.namespaces is None or self.namespaces.allows(namespace_name, namespace_labels)

    def to_dict(self) -> dict[str, Any]:
        """The profile in its YAML form with every default filled in; parses back to itself."""
        resources = self.resources
        document: dict[str, Any] = {
            "image": self.image,
            "runtimeClassName": self.runtime_class_name,
            "unsafe": self.unsafe,
            "command": list(self.command),
            "user": self.user,
            "group": self.group,
            "resources": {
                "cpu": resources.cpu.text,
                "cpuRequest": resources.effective_cpu_request.text,
                "memory": resources.memory.text,
                "scratch": resources.scratch.text,
                "processes": resources.processes,
                "ephemeralStorage": resources.ephemeral_storage.text,
            },
            "exec": {
                "timeoutSeconds": self.exec.timeout_seconds,
                "outputBytes": self.exec.output_bytes,
            },
            "lifetime": {
                "idleTimeoutSeconds": self.lifetime.idle_timeout_seconds,
                "maxAgeSeconds": self.lifetime.max_age_seconds,
            },
        }
        if self.namespaces is not None:
            document["namespaces"] = self.namespaces.to_dict()
        return document


# --- Parsing ------------------------------------------------------------------------------


class _Invalid(Exception):
    """One thing wrong with a profile document; parse_profile adds the profile's name."""


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


def _load_yaml(raw_yaml: str) -> object:
    try:
        return yaml.load(raw_yaml, Loader=_StrictLoader)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise _Invalid(f"invalid YAML{where}: {error.problem}") from None
    except yaml.YAMLError as error:
        raise _Invalid(f"invalid YAML: {error}") from None


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
    profiles: dict[str, Profile] = {}
    broken: dict[str, ProfileError] = {}
    for name, raw_yaml in data.items():
        try:
            profiles[name] = parse_profile(name, raw_yaml)
        except ProfileError as error:
            broken[name] = error
    return profiles, broken


def resolve_profile(
    name: str,
    namespace: str,
    namespace_labels: Mapping[str, str],
    profiles: Mapping[str, Profile],
    broken: Mapping[str, ProfileError],
) -> Profile:
    """The profile a Sandbox in this namespace gets, or the error explaining why it gets none.

    A name in both mappings (a caller keeping the last good version of a profile whose
    new version is broken) resolves to the good one. Raises ProfileNotAllowed,
    ProfileError (the profile is broken) or ProfileNotFound.
    """
    if namespace_labels.get(LABEL_NAMESPACE_OPT_IN) != NAMESPACE_OPT_IN_VALUE:
        raise ProfileNotAllowed(name, namespace, opted_in=False)
    profile = profiles.get(name)
    if profile is None:
        if name in broken:
            # A fresh exception: re-raising the stored one would grow its traceback each time.
            raise ProfileError(name, broken[name].detail)
        usable_here = [
            other.name
            for other in profiles.values()
            if other.allows_namespace(namespace, namespace_labels)
        ]
        raise ProfileNotFound(name, usable_here)
    if not profile.allows_namespace(namespace, namespace_labels):
        raise ProfileNotAllowed(name, namespace, opted_in=True)
    return profile


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
            "image is required: the container image to run, already imported into "
            "the nodes' containerd (images are never pulled)"
        )
    return Profile(
        name=name,
        image=_image(document),
        runtime_class_name=_runtime_class_name(document),
        unsafe=document.boolean("unsafe", default=False),
        command=_command(document),
        user=document.integer("user", _DEFAULT_ID, maximum=_MAX_ID),
        group=document.integer("group", _DEFAULT_ID, maximum=_MAX_ID),
        resources=_resources(document.section("resources", _RESOURCES_FIELDS)),
        exec=_exec_limits(document.section("exec", _EXEC_FIELDS)),
        lifetime=_lifetime(document.section("lifetime", _LIFETIME_FIELDS)),
        namespaces=_allowed_namespaces(document.section("namespaces", _NAMESPACES_FIELDS)),
    )


def _image(document: _Section) -> str:
    image = document.string("image", default="")
    if any(character.isspace() for character in image):
        raise _Invalid(f'image "{image}" must not contain whitespace')
    return image


def _runtime_class_name(document: _Section) -> str:
    runtime_class_name = document.string("runtimeClassName", _DEFAULT_RUNTIME_CLASS)
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
        return _DEFAULT_RESOURCES
    cpu = section.millicores_quantity("cpu", _DEFAULT_CPU)
    resources = Resources(
        cpu=cpu,
        cpu_request=_cpu_request(section, cpu),
        memory=section.bytes_quantity("memory", _DEFAULT_MEMORY),
        scratch=section.bytes_quantity("scratch", _DEFAULT_SCRATCH),
        ephemeral_storage=section.bytes_quantity("ephemeralStorage", _DEFAULT_EPHEMERAL_STORAGE),
        processes=section.integer("processes", _DEFAULT_RESOURCES.processes),
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
        return _DEFAULT_EXEC_LIMITS
    return ExecLimits(
        timeout_seconds=section.integer("timeoutSeconds", _DEFAULT_EXEC_LIMITS.timeout_seconds),
        output_bytes=section.integer("outputBytes", _DEFAULT_EXEC_LIMITS.output_bytes),
    )


def _lifetime(section: _Section | None) -> Lifetime:
    if section is None:
        return _DEFAULT_LIFETIME
    default = _DEFAULT_LIFETIME
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
