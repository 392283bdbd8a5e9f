"""Errors a user can act on; each carries the condition reason it surfaces as."""

from collections.abc import Iterable
from typing import ClassVar

from openblox.names import LABEL_NAMESPACE_OPT_IN, NAMESPACE_OPT_IN_VALUE, Reason


class OpenbloxError(Exception):
    """A problem with a Sandbox or profile, phrased for the person who can fix it."""

    reason: ClassVar[Reason]

    @property
    def message(self) -> str:
        return str(self)


class SandboxError(OpenbloxError):
    """A Sandbox object that does not have the shape the CRD promises."""

    reason = Reason.SANDBOX_INVALID


class ProfileError(OpenbloxError):
    """A profile in the openblox-profiles ConfigMap that cannot be used as written."""

    reason = Reason.PROFILE_INVALID

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f'profile "{name}" is invalid: {message}')
        self.profile_name = name
        self.detail = message


class ProfileNotFound(OpenbloxError):
    reason = Reason.PROFILE_NOT_FOUND

    def __init__(self, name: str, available: Iterable[str]) -> None:
        names = ", ".join(sorted(available)) or "none"
        super().__init__(f'profile "{name}" does not exist (profiles available here: {names})')
        self.profile_name = name


class ProfileNotAllowed(OpenbloxError):
    reason = Reason.PROFILE_NOT_ALLOWED

    def __init__(self, name: str, namespace: str, *, opted_in: bool) -> None:
        if opted_in:
            message = f'profile "{name}" is not allowed in namespace "{namespace}"'
        else:
            message = (
                f'namespace "{namespace}" has not opted in to sandboxes '
                f"(label it {LABEL_NAMESPACE_OPT_IN}={NAMESPACE_OPT_IN_VALUE})"
            )
        super().__init__(message)
        self.profile_name = name
        self.namespace = namespace


class LifetimeTooLong(OpenbloxError):
    """A Sandbox asked for a longer lifetime than its profile allows; it may only shorten."""

    reason = Reason.LIFETIME_TOO_LONG

    def __init__(self, field: str, asked: int, allowed: int, profile_name: str) -> None:
        super().__init__(
            f'spec.{field} is {asked}s but profile "{profile_name}" allows at most '
            f"{allowed}s; a Sandbox may only shorten its profile's lifetime"
        )
        self.field = field
        self.asked = asked
        self.allowed = allowed
