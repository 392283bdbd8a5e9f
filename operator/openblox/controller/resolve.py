"""What a Sandbox should be, decided before anything is made: the first half of a reconcile.

Its profile (allowed in its namespace), its lifetime and deadline, whether the profile's
runtime can run here, and whether its time is up. The answer is a frozen value: either
`Wanted` (a pod should run: the reconcile converges one) or the reason none may be made
(`Refused`, `RuntimeUnavailable`, `Expired`), each with the conditions' observation and
the Event it warrants. It writes nothing and records nothing; it
reads the profile store and what the watches keep (a namespace or RuntimeClass the watch
has not shown yet is read once).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from openblox.builders.conditions import Observation, Problem
from openblox.controller.namespaces import Namespaces
from openblox.controller.profile_store import ProfileStore
from openblox.controller.runtime_checks import RuntimeChecks
from openblox.denials import Denial, lifetime_denial
from openblox.lifetime import Expiry, compute_expiry, effective_lifetime
from openblox.lifetime.reaping import expiry_of
from openblox.models import LifetimeTooLong, OpenbloxError, Profile, Sandbox
from openblox.models.profile import resolve_profile
from openblox.names import Reason


@dataclass(frozen=True)
class _Resolved:
    """The Sandbox's profile and deadline are known."""

    profile: Profile
    expiry: Expiry

    def observation(self) -> Observation:
        return Observation(
            expiry=self.expiry,
            expected_boundary=self.profile.expected_boundary,
            runtime_available=True,
        )


@dataclass(frozen=True)
class Wanted(_Resolved):
    """A pod should run for the Sandbox: this profile's, until this expiry. Its
    observation is what holds before the pod is looked at; converging adds the pod's."""


@dataclass(frozen=True)
class Refused:
    """The profile (not allowed in the namespace, unknown, broken) or the lifetime asked
    for cannot be had. No new pod; the clock runs on (`expiry_of`): a namespace that
    stopped allowing the profile, or a profile shortened or deleted since, must not leave
    the Sandbox, or the pod it has, without a deadline."""

    error: OpenbloxError | LifetimeTooLong
    expiry: Expiry | None
    profile: None = None

    def observation(self) -> Observation:
        return Observation(profile_problem=Problem.from_error(self.error), expiry=self.expiry)

    def event(self) -> tuple[str, str] | None:
        return self.error.reason, self.error.message


@dataclass(frozen=True)
class RuntimeUnavailable(_Resolved):
    """The profile's runtime cannot run here: nothing is started under another."""

    message: str

    def observation(self) -> Observation:
        resolved = super().observation()
        return replace(resolved, runtime_available=False, runtime_message=self.message)

    def event(self) -> tuple[str, str] | None:
        return Reason.RUNTIME_UNAVAILABLE, self.message


@dataclass(frozen=True)
class Expired(_Resolved):
    """Its time is up: the reaper deletes it, and no new pod is made for it."""

    denial: Denial

    def observation(self) -> Observation:
        return replace(super().observation(), denials=(self.denial,))

    def event(self) -> tuple[str, str] | None:
        return None  # the reaper records `Expired` as it deletes it


Resolution = Wanted | Refused | RuntimeUnavailable | Expired


def resolve(
    sandbox: Sandbox,
    now: datetime,
    *,
    profiles: ProfileStore,
    namespaces: Namespaces,
    runtimes: RuntimeChecks,
) -> Resolution:
    """What `sandbox` should be at `now`; raises only if a read the watches could not
    answer fails (the reconcile is then retried)."""
    try:
        profile = _profile(sandbox, profiles, namespaces)
        lifetime = effective_lifetime(sandbox, profile)
    except (OpenbloxError, LifetimeTooLong) as error:
        return Refused(error, expiry_of(sandbox, profiles.snapshot(), now))
    expiry = compute_expiry(sandbox, lifetime, now)
    problem = runtimes.problem(profile)
    if problem:
        return RuntimeUnavailable(profile, expiry, problem)
    if expiry.expired:
        return Expired(profile, expiry, lifetime_denial(sandbox, profile, expiry))
    return Wanted(profile, expiry)


def _profile(sandbox: Sandbox, profiles: ProfileStore, namespaces: Namespaces) -> Profile:
    labels = namespaces.labels(sandbox.namespace)
    broken = {}
    refusal = profiles.refusal(sandbox.spec.profile)
    if refusal is not None and profiles.get(sandbox.spec.profile) is None:
        broken[sandbox.spec.profile] = refusal
    return resolve_profile(
        sandbox.spec.profile, sandbox.namespace, labels, profiles.snapshot(), broken
    )
