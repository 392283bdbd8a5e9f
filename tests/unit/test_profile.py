import textwrap

import pytest
import yaml

from openblox.models import (
    AllowedNamespaces,
    ExecLimits,
    Lifetime,
    Profile,
    ProfileError,
    ProfileNotAllowed,
    ProfileNotFound,
    Quantity,
    Resources,
    parse_profile,
    parse_profiles,
    resolve_profile,
)
from tests.unit.factories import DEFAULT_PROFILE_YAML, IMAGE_LINE, PINNED_IMAGE, default_profile

MI = 1024**2
OPTED_IN = {"openblox.sh/sandboxes": "enabled"}


def test_every_field_but_image_takes_its_restrictive_default() -> None:
    profile = parse_profile("code-exec", DEFAULT_PROFILE_YAML)

    assert profile == Profile(
        name="code-exec",
        image=PINNED_IMAGE,
        runtime_class_name="gvisor",
        unsafe=False,
        command=("/usr/bin/tini", "-s", "--", "/bin/sleep", "infinity"),
        user=1000,
        group=1000,
        resources=Resources(
            cpu=Quantity("1", 1000),
            memory=Quantity("512Mi", 512 * MI),
            scratch=Quantity("128Mi", 128 * MI),
            ephemeral_storage=Quantity("64Mi", 64 * MI),
            processes=256,
        ),
        exec=ExecLimits(timeout_seconds=60, output_bytes=1048576),
        lifetime=Lifetime(idle_timeout_seconds=900, max_age_seconds=3600),
        namespaces=None,
    )
    assert profile.expected_boundary == "gvisor"


DS_IMAGE = "registry.local:5000/ds@sha256:" + "0123" * 16


def test_parses_every_field() -> None:
    profile = parse_profile(
        "data-science",
        f"image: {DS_IMAGE}\n"
        + textwrap.dedent(
            """
            runtimeClassName: kata
            command: [/bin/sleep, infinity]
            user: 2000
            group: 3000
            resources: {cpu: 1500m, memory: 2Gi, scratch: 0.5Gi, processes: 64,
                        ephemeralStorage: 100M}
            exec: {timeoutSeconds: 5, outputBytes: 4096}
            lifetime: {idleTimeoutSeconds: 60, maxAgeSeconds: 120}
            namespaces:
              names: [research, ml]
              selector: {matchLabels: {team: ds}}
            """
        ),
    )

    assert profile.image == DS_IMAGE
    assert profile.runtime_class_name == "kata"
    assert profile.expected_boundary == "kata"
    assert profile.command == ("/bin/sleep", "infinity")
    assert (profile.user, profile.group) == (2000, 3000)
    assert profile.resources == Resources(
        cpu=Quantity("1500m", 1500),
        memory=Quantity("2Gi", 2 * 1024 * MI),
        scratch=Quantity("0.5Gi", 512 * MI),
        ephemeral_storage=Quantity("100M", 100_000_000),
        processes=64,
    )
    assert profile.exec == ExecLimits(timeout_seconds=5, output_bytes=4096)
    assert profile.lifetime == Lifetime(idle_timeout_seconds=60, max_age_seconds=120)
    assert profile.namespaces == AllowedNamespaces(
        names=frozenset({"research", "ml"}), match_labels=(("team", "ds"),)
    )


def test_numeric_quantities_keep_a_usable_text_for_the_pod() -> None:
    profile = parse_profile("p", IMAGE_LINE + "resources: {cpu: 2, memory: 1073741824}\n")

    assert profile.resources.cpu == Quantity("2", 2000)
    assert profile.resources.memory == Quantity("1073741824", 1024 * MI)


def test_cpu_is_requested_at_its_limit_unless_the_profile_asks_for_less() -> None:
    guaranteed = parse_profile("p", IMAGE_LINE + "resources: {cpu: 500m}\n").resources
    burstable = parse_profile("p", IMAGE_LINE + "resources: {cpu: 500m, cpuRequest: 50m}\n")

    assert guaranteed.cpu_request is None
    assert guaranteed.effective_cpu_request == Quantity("500m", 500)
    assert burstable.resources.cpu == Quantity("500m", 500)
    assert burstable.resources.effective_cpu_request == Quantity("50m", 50)
    assert burstable.to_dict()["resources"]["cpuRequest"] == "50m"
    assert parse_profile("p", yaml.safe_dump(burstable.to_dict())) == burstable


def test_a_cpu_request_equal_to_the_limit_is_the_default_spelled_out() -> None:
    spelled_out = parse_profile("p", IMAGE_LINE + "resources: {cpu: 500m, cpuRequest: 500m}\n")

    assert spelled_out == parse_profile("p", IMAGE_LINE + "resources: {cpu: 500m}\n")


def test_an_unsafe_profile_may_name_an_unapproved_runtime_and_claims_no_boundary() -> None:
    profile = parse_profile("debug", IMAGE_LINE + "runtimeClassName: runc\nunsafe: true\n")

    assert profile.runtime_class_name == "runc"
    assert profile.unsafe is True
    assert profile.expected_boundary is None


def test_yaml_merge_keys_may_override_merged_values() -> None:
    raw_yaml = """
        image: i@sha256:5555555555555555555555555555555555555555555555555555555555555555
        lifetime:
          <<: {idleTimeoutSeconds: 10, maxAgeSeconds: 20}
          maxAgeSeconds: 30
    """
    profile = parse_profile("p", textwrap.dedent(raw_yaml))

    assert profile.lifetime == Lifetime(idle_timeout_seconds=10, max_age_seconds=30)


def test_to_dict_is_the_yaml_form_and_parses_back_to_the_same_profile() -> None:
    profile = parse_profile(
        "p", IMAGE_LINE + "namespaces: {names: [b, a], selector: {matchLabels: {x: y}}}\n"
    )
    document = profile.to_dict()

    assert document["namespaces"] == {"names": ["a", "b"], "selector": {"matchLabels": {"x": "y"}}}
    assert document["resources"]["ephemeralStorage"] == "64Mi"
    assert parse_profile("p", yaml.safe_dump(document)) == profile


class TestDigest:
    def test_is_stable_and_short(self) -> None:
        assert default_profile().digest == default_profile().digest
        assert len(default_profile().digest) == 16
        assert int(default_profile().digest, 16) >= 0

    def test_ignores_spelling_that_changes_nothing(self) -> None:
        spelled_out = IMAGE_LINE + "user: 1000\nexec: {timeoutSeconds: 60}\n"
        assert parse_profile("code-exec", spelled_out).digest == default_profile().digest

    def test_covers_content_not_the_key_it_is_stored_under(self) -> None:
        assert default_profile("other").digest == default_profile().digest

    @pytest.mark.parametrize(
        "change",
        [
            "runtimeClassName: kata",
            "command: [/bin/sleep, infinity]",
            "user: 1001",
            "resources: {memory: 1Gi}",
            "resources: {cpu: 1000m}",
            "resources: {cpuRequest: 100m}",
            "exec: {outputBytes: 10}",
            "lifetime: {maxAgeSeconds: 60}",
            "namespaces: {names: [a]}",
        ],
    )
    def test_changes_with_any_field(self, change: str) -> None:
        changed = parse_profile("code-exec", f"{DEFAULT_PROFILE_YAML}{change}\n")
        assert changed.digest != default_profile().digest

    def test_changes_with_the_image(self) -> None:
        changed = parse_profile(
            "code-exec", "image: openblox.local/sandbox@sha256:" + "6" * 64 + "\n"
        )
        assert changed.digest != default_profile().digest


class TestAllowsNamespace:
    def test_without_namespaces_every_namespace_is_allowed(self) -> None:
        assert default_profile().allows_namespace("anything", {})

    def test_by_name(self) -> None:
        profile = parse_profile("p", IMAGE_LINE + "namespaces: {names: [team-a]}\n")
        assert profile.allows_namespace("team-a", {})
        assert not profile.allows_namespace("team-b", {"team": "a"})

    def test_by_every_selector_label(self) -> None:
        profile = parse_profile(
            "p", IMAGE_LINE + "namespaces: {selector: {matchLabels: {team: a, tier: dev}}}\n"
        )
        assert profile.allows_namespace("x", {"team": "a", "tier": "dev", "other": "1"})
        assert not profile.allows_namespace("x", {"team": "a"})
        assert not profile.allows_namespace("x", {"team": "a", "tier": "prod"})

    def test_by_name_or_selector(self) -> None:
        profile = parse_profile(
            "p", IMAGE_LINE + "namespaces: {names: [ops], selector: {matchLabels: {team: a}}}\n"
        )
        assert profile.allows_namespace("ops", {})
        assert profile.allows_namespace("x", {"team": "a"})
        assert not profile.allows_namespace("x", {"team": "b"})

    def test_an_empty_selector_matches_every_namespace_as_in_kubernetes(self) -> None:
        profile = parse_profile("p", IMAGE_LINE + "namespaces: {selector: {}}\n")
        assert profile.allows_namespace("x", {})


class TestResolveProfile:
    def setup_method(self) -> None:
        self.profiles, self.broken = parse_profiles(
            {
                "code-exec": DEFAULT_PROFILE_YAML,
                "ops-only": IMAGE_LINE + "namespaces: {names: [ops]}\n",
                "broken": IMAGE_LINE + "user: 0\n",
            }
        )

    def resolve(
        self, name: str, namespace: str = "team-a", labels: dict[str, str] | None = None
    ) -> Profile:
        return resolve_profile(
            name, namespace, OPTED_IN if labels is None else labels, self.profiles, self.broken
        )

    def test_resolves_an_allowed_profile(self) -> None:
        assert self.resolve("code-exec") == self.profiles["code-exec"]
        assert self.resolve("ops-only", "ops") == self.profiles["ops-only"]

    def test_a_namespace_that_has_not_opted_in_gets_nothing(self) -> None:
        with pytest.raises(ProfileNotAllowed) as raised:
            self.resolve("code-exec", labels={"openblox.sh/sandboxes": "disabled"})
        assert raised.value.reason == "ProfileNotAllowed"
        assert str(raised.value) == (
            'namespace "team-a" has not opted in to sandboxes '
            "(label it openblox.sh/sandboxes=enabled)"
        )

    def test_a_profile_scoped_elsewhere_is_not_allowed(self) -> None:
        with pytest.raises(
            ProfileNotAllowed, match='profile "ops-only" is not allowed in namespace "team-a"'
        ):
            self.resolve("ops-only")

    def test_an_unknown_profile_lists_only_the_profiles_usable_here(self) -> None:
        with pytest.raises(ProfileNotFound) as raised:
            self.resolve("nope")
        assert raised.value.reason == "ProfileNotFound"
        assert (
            str(raised.value)
            == 'profile "nope" does not exist (profiles available here: code-exec)'
        )

    def test_a_broken_profile_reports_why_with_a_fresh_exception(self) -> None:
        raised = []
        for _ in range(2):
            with pytest.raises(ProfileError) as error:
                self.resolve("broken")
            raised.append(error.value)
        first, second = raised
        assert first is not second
        assert self.broken["broken"] not in raised
        assert str(first) == str(self.broken["broken"])
        assert first.reason == "ProfileInvalid"

    def test_a_last_good_version_kept_by_the_caller_wins_over_its_broken_successor(self) -> None:
        kept = {**self.profiles, "broken": self.profiles["code-exec"]}
        assert resolve_profile("broken", "team-a", OPTED_IN, kept, self.broken) == kept["broken"]


@pytest.mark.parametrize(
    "image",
    [
        "sandbox@sha256:" + "a" * 64,
        "openblox.local/sandbox@sha256:" + "a" * 64,
        "localhost:5001/openblox/sandbox@sha256:" + "a" * 64,
        "registry.example/team/sandbox:1.0@sha256:" + "a" * 64,
    ],
)
def test_an_image_pinned_by_digest_is_taken_as_written(image: str) -> None:
    assert parse_profile("p", f"image: {image}\n").image == image
