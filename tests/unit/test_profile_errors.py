"""Every way a profile can be wrong gets a message that tells the admin what to fix,
and a broken profile never takes the other profiles in the ConfigMap down with it."""

import pytest

from openblox.models import ProfileError, parse_profile, parse_profiles
from tests.unit.factories import DEFAULT_PROFILE_YAML, IMAGE_LINE

BAD_PROFILES = {
    "invalid YAML": (
        "image: [unclosed\n",
        "invalid YAML at line 2, column 1: expected ',' or ']', but got '<stream end>'",
    ),
    "duplicate key": (
        "image: a\nimage: b\n",
        'invalid YAML at line 2, column 1: duplicate key "image"',
    ),
    "not a mapping": (
        "- image: a\n",
        "a profile must be a mapping, got a list",
    ),
    "empty document": (
        "",
        "a profile must be a mapping, got null",
    ),
    "unknown field": (
        IMAGE_LINE + "network: host\n",
        'unknown field "network" (known fields: image, runtimeClassName, unsafe, command, '
        "user, group, resources, exec, lifetime, namespaces)",
    ),
    "unknown field with a likely typo": (
        IMAGE_LINE + "runtimeClass: gvisor\n",
        'unknown field "runtimeClass"; did you mean "runtimeClassName"?',
    ),
    "unknown nested field": (
        IMAGE_LINE + "resources: {memroy: 1Gi}\n",
        'unknown field "resources.memroy"; did you mean "memory"? (known fields in '
        "resources: cpu, cpuRequest, memory, scratch, processes, ephemeralStorage)",
    ),
    "unknown field two levels down": (
        IMAGE_LINE + "namespaces: {selector: {matchExpressions: []}}\n",
        'unknown field "namespaces.selector.matchExpressions"',
    ),
    "missing image": (
        "runtimeClassName: gvisor\n",
        "image is required",
    ),
    "empty image": (
        'image: ""\n',
        'image must be a non-empty string, got string ""',
    ),
    "image with whitespace": (
        "image: my image\n",
        'image "my image" must not contain whitespace',
    ),
    "image by tag only": (
        "image: registry.example/sandbox:1.0\n",
        'image "registry.example/sandbox:1.0" is not pinned by digest: name it as '
        "registry.example/sandbox:1.0@sha256:<digest>, with the digest the registry gives for "
        "the image you reviewed",
    ),
    "image with a short digest": (
        "image: registry.example/sandbox@sha256:abc\n",
        'image "registry.example/sandbox@sha256:abc" has the digest "sha256:abc": a digest is '
        "sha256: and 64 lowercase hexadecimal digits",
    ),
    "image with another algorithm": (
        "image: sandbox@md5:" + "a" * 32 + "\n",
        'has the digest "md5:' + "a" * 32 + '"',
    ),
    "image whose name has capitals": (
        "image: Registry.example/Sandbox@sha256:" + "a" * 64 + "\n",
        'has the name "Registry.example/Sandbox", which is not an image reference',
    ),
    "image with a digest and no name": (
        "image: '@sha256:" + "a" * 64 + "'\n",
        'has the name "", which is not an image reference',
    ),
    "unapproved runtime": (
        IMAGE_LINE + "runtimeClassName: runc\n",
        'runtimeClassName "runc" is not approved for untrusted code (approved: gvisor, kata); '
        "set unsafe: true only if you accept a weaker boundary",
    ),
    "runtime that is not a name": (
        IMAGE_LINE + "runtimeClassName: Not_A_Name\nunsafe: true\n",
        'runtimeClassName "Not_A_Name" is not a valid RuntimeClass name',
    ),
    "unsafe not a boolean": (
        IMAGE_LINE + "unsafe: 'yes'\n",
        'unsafe must be true or false, got string "yes"',
    ),
    "root user": (
        IMAGE_LINE + "user: 0\n",
        "user must be between 1 and 2147483647, got 0",
    ),
    "negative group": (
        IMAGE_LINE + "group: -5\n",
        "group must be between 1 and 2147483647, got -5",
    ),
    "user as a string": (
        IMAGE_LINE + "user: '1000'\n",
        'user must be a whole number, got string "1000"',
    ),
    "user as a boolean": (
        IMAGE_LINE + "user: true\n",
        "user must be a whole number, got boolean true",
    ),
    "empty command": (
        IMAGE_LINE + "command: []\n",
        "command must be a non-empty list of strings starting with the program, got a list",
    ),
    "command as a string": (
        IMAGE_LINE + "command: sleep infinity\n",
        "command must be a non-empty list of strings starting with the program, "
        'got string "sleep infinity"',
    ),
    "bad quantity": (
        IMAGE_LINE + "resources: {memory: 1GB}\n",
        'resources.memory: "1GB" is not a Kubernetes quantity (for example 500m, 2, 512Mi, 1Gi)',
    ),
    "milli bytes": (
        IMAGE_LINE + "resources: {memory: 512m}\n",
        "resources.memory 512m is not a whole number of bytes "
        '("m" means thousandths; did you mean "Mi"?)',
    ),
    "sub-millicore cpu": (
        IMAGE_LINE + "resources: {cpu: 0.0001}\n",
        "resources.cpu 0.0001 is finer than one millicore (1m)",
    ),
    "zero cpu": (
        IMAGE_LINE + "resources: {cpu: '0'}\n",
        "resources.cpu must be greater than zero, got 0",
    ),
    "cpu request above its limit": (
        IMAGE_LINE + "resources: {cpu: 500m, cpuRequest: 600m}\n",
        "resources.cpuRequest 600m is above resources.cpu 500m: a request can be at most "
        "the limit (leave cpuRequest out to make them equal)",
    ),
    "cpu request above the default limit": (
        IMAGE_LINE + "resources: {cpuRequest: 2}\n",
        "resources.cpuRequest 2 is above resources.cpu 1",
    ),
    "negative cpu request": (
        IMAGE_LINE + "resources: {cpu: 500m, cpuRequest: -50m}\n",
        "resources.cpuRequest must be greater than zero, got -50m",
    ),
    "zero cpu request": (
        IMAGE_LINE + "resources: {cpu: 500m, cpuRequest: 0}\n",
        "resources.cpuRequest must be greater than zero, got 0",
    ),
    "cpu request that is not a quantity": (
        IMAGE_LINE + "resources: {cpu: 500m, cpuRequest: half}\n",
        'resources.cpuRequest: "half" is not a Kubernetes quantity',
    ),
    "cpu request as a mapping": (
        IMAGE_LINE + "resources: {cpu: 500m, cpuRequest: {min: 50m}}\n",
        "resources.cpuRequest must be a quantity such as 512Mi, got a mapping",
    ),
    "sub-millicore cpu request": (
        IMAGE_LINE + "resources: {cpu: 500m, cpuRequest: 0.0005}\n",
        "resources.cpuRequest 0.0005 is finer than one millicore (1m)",
    ),
    "negative memory": (
        IMAGE_LINE + "resources: {memory: -1Gi}\n",
        "resources.memory must be greater than zero, got -1Gi",
    ),
    "quantity as a list": (
        IMAGE_LINE + "resources: {scratch: [1]}\n",
        "resources.scratch must be a quantity such as 512Mi, got a list",
    ),
    "absurd quantity": (
        IMAGE_LINE + "resources: {ephemeralStorage: 100Ei}\n",
        "resources.ephemeralStorage 100Ei is too large",
    ),
    "zero processes": (
        IMAGE_LINE + "resources: {processes: 0}\n",
        "resources.processes must be between 1 and 2147483647, got 0",
    ),
    "zero timeout": (
        IMAGE_LINE + "exec: {timeoutSeconds: 0}\n",
        "exec.timeoutSeconds must be between 1 and 2147483647, got 0",
    ),
    "fractional output cap": (
        IMAGE_LINE + "exec: {outputBytes: 1.5}\n",
        "exec.outputBytes must be a whole number, got number 1.5",
    ),
    "negative idle timeout": (
        IMAGE_LINE + "lifetime: {idleTimeoutSeconds: -1}\n",
        "lifetime.idleTimeoutSeconds must be between 1 and 2147483647, got -1",
    ),
    "section not a mapping": (
        IMAGE_LINE + "lifetime: 3600\n",
        "lifetime must be a mapping, got number 3600",
    ),
    "scratch larger than memory": (
        IMAGE_LINE + "resources: {memory: 256Mi, scratch: 1Gi}\n",
        "resources.scratch 1Gi does not fit in resources.memory 256Mi: /tmp and /workspace "
        "are each a tmpfs of up to 1Gi, plus 16Mi of state, all drawn from the memory limit, "
        "so memory must be more than 2 x scratch + 16Mi",
    ),
    "scratch that leaves no memory to run in": (
        IMAGE_LINE + "resources: {memory: 272Mi, scratch: 128Mi}\n",
        "resources.scratch 128Mi does not fit in resources.memory 272Mi",
    ),
    "namespaces allowing nothing": (
        IMAGE_LINE + "namespaces: {names: []}\n",
        "namespaces must list names or a selector; remove it to allow every namespace "
        "that has opted in to sandboxes",
    ),
    "namespace that is not a name": (
        IMAGE_LINE + "namespaces: {names: [Team_A]}\n",
        'namespaces.names: string "Team_A" is not a namespace name',
    ),
    "unquoted boolean label value": (
        IMAGE_LINE + "namespaces: {selector: {matchLabels: {sandboxes: true}}}\n",
        "namespaces.selector.matchLabels.sandboxes must be a string (quote true, false and "
        "numbers in YAML), got boolean true",
    ),
}


@pytest.mark.parametrize(("raw_yaml", "message"), BAD_PROFILES.values(), ids=BAD_PROFILES.keys())
def test_bad_profile_gets_a_clear_message(raw_yaml: str, message: str) -> None:
    with pytest.raises(ProfileError) as raised:
        parse_profile("code-exec", raw_yaml)

    error = raised.value
    assert error.profile_name == "code-exec"
    assert error.reason == "ProfileInvalid"
    assert message in error.detail
    assert str(error) == f'profile "code-exec" is invalid: {error.detail}'


@pytest.mark.parametrize("name", ["Code-Exec", "code_exec", "-code", "code.exec", "a" * 64, ""])
def test_a_profile_name_must_be_a_dns_label(name: str) -> None:
    with pytest.raises(ProfileError, match="must be a DNS label"):
        parse_profile(name, DEFAULT_PROFILE_YAML)


def test_a_63_character_name_is_a_dns_label() -> None:
    assert parse_profile("a" * 63, DEFAULT_PROFILE_YAML).name == "a" * 63


def test_one_broken_profile_never_hides_the_others() -> None:
    data = {f"bad-{index}": raw_yaml for index, (raw_yaml, _) in enumerate(BAD_PROFILES.values())}
    data |= {
        "code-exec": DEFAULT_PROFILE_YAML,
        "Bad_Name": DEFAULT_PROFILE_YAML,
        "zz-last": IMAGE_LINE,
    }

    profiles, broken = parse_profiles(data)

    assert sorted(profiles) == ["code-exec", "zz-last"]
    assert sorted(broken) == sorted(set(data) - {"code-exec", "zz-last"})
    assert all(error.profile_name == name for name, error in broken.items())


def test_a_value_that_is_not_text_is_reported_not_crashed_on() -> None:
    data: dict[str, object] = {"code-exec": DEFAULT_PROFILE_YAML, "binary": b"image: i"}
    profiles, broken = parse_profiles(data)  # type: ignore[arg-type]

    assert list(profiles) == ["code-exec"]
    assert "its value must be a YAML string, got bytes" in str(broken["binary"])
