from datetime import datetime, timedelta

import pytest

from openblox.lifetime import Expiry, Lifetime, LifetimeTooLong, compute_expiry, effective_lifetime
from openblox.timestamps import format_timestamp
from tests.unit.factories import CREATED, default_profile, make_sandbox

LIFETIME = Lifetime(idle_timeout_seconds=900, max_age_seconds=3600)


def at(seconds: int) -> datetime:
    return CREATED + timedelta(seconds=seconds)


def active_at(seconds: int) -> dict[str, str]:
    return {"openblox.sh/last-activity": format_timestamp(at(seconds))}


class TestEffectiveLifetime:
    def test_is_the_profiles_when_the_sandbox_asks_nothing(self) -> None:
        assert effective_lifetime(make_sandbox(), default_profile()) == LIFETIME

    def test_a_sandbox_may_shorten_either_limit(self) -> None:
        sandbox = make_sandbox(spec={"idleTimeoutSeconds": 60, "maxAgeSeconds": 3600})
        assert effective_lifetime(sandbox, default_profile()) == Lifetime(60, 3600)

    @pytest.mark.parametrize(
        ("spec", "message"),
        [
            (
                {"idleTimeoutSeconds": 901},
                'spec.idleTimeoutSeconds is 901s but profile "code-exec" allows at most 900s; '
                "a Sandbox may only shorten its profile's lifetime",
            ),
            (
                {"maxAgeSeconds": 86400},
                'spec.maxAgeSeconds is 86400s but profile "code-exec" allows at most 3600s',
            ),
        ],
    )
    def test_a_sandbox_may_not_lengthen_either_limit(
        self, spec: dict[str, int], message: str
    ) -> None:
        with pytest.raises(LifetimeTooLong) as raised:
            effective_lifetime(make_sandbox(spec=spec), default_profile())
        assert message in str(raised.value)
        assert raised.value.reason == "LifetimeTooLong"
        assert raised.value.allowed < raised.value.asked


class TestComputeExpiry:
    def test_idle_counts_from_creation_without_activity(self) -> None:
        expiry = compute_expiry(make_sandbox(), LIFETIME, now=at(100))
        assert expiry == Expiry(expires_at=at(900), reason="Idle", expired=False)

    def test_idle_counts_from_the_last_activity(self) -> None:
        sandbox = make_sandbox(annotations=active_at(1000))
        assert compute_expiry(sandbox, LIFETIME, now=at(1899)) == Expiry(at(1900), "Idle", False)
        assert compute_expiry(sandbox, LIFETIME, now=at(1900)) == Expiry(at(1900), "Idle", True)

    def test_max_age_wins_when_it_comes_first_however_busy(self) -> None:
        sandbox = make_sandbox(annotations=active_at(3500))
        assert compute_expiry(sandbox, LIFETIME, now=at(3599)) == Expiry(at(3600), "MaxAge", False)
        assert compute_expiry(sandbox, LIFETIME, now=at(3600)) == Expiry(at(3600), "MaxAge", True)

    def test_max_age_is_the_reason_at_a_tie(self) -> None:
        sandbox = make_sandbox(annotations=active_at(2700))
        assert compute_expiry(sandbox, LIFETIME, now=at(0)).reason == "MaxAge"

    def test_an_activity_stamp_in_the_future_cannot_outlive_max_age(self) -> None:
        sandbox = make_sandbox(annotations=active_at(10**6))
        assert compute_expiry(sandbox, LIFETIME, now=at(3600)) == Expiry(at(3600), "MaxAge", True)

    def test_an_activity_stamp_at_the_end_of_time_is_max_age_not_an_overflow(self) -> None:
        # Year 9999 + the idle timeout used to overflow, and the error
        # stopped the reaper's pass for every sandbox, not only this one.
        sandbox = make_sandbox(annotations={"openblox.sh/last-activity": "9999-12-31T23:59:59Z"})
        expiry = compute_expiry(sandbox, LIFETIME, now=at(3600))
        assert expiry == Expiry(at(3600), "MaxAge", True)

    def test_a_stamp_no_utc_time_can_hold_counts_as_no_activity(self) -> None:
        # Valid RFC 3339, yet past the calendar's ends once in UTC: idle time runs from
        # creation, so such a stamp can shorten a life but never lengthen it.
        for stamp in ("9999-12-31T23:59:59-01:00", "0001-01-01T00:00:00+01:00"):
            sandbox = make_sandbox(annotations={"openblox.sh/last-activity": stamp})
            assert sandbox.last_activity is None
            expiry = compute_expiry(sandbox, LIFETIME, now=at(900))
            assert expiry == Expiry(at(900), "Idle", True)

    def test_an_activity_stamp_before_creation_counts_from_creation(self) -> None:
        sandbox = make_sandbox(annotations=active_at(-(10**6)))
        assert compute_expiry(sandbox, LIFETIME, now=at(0)).expires_at == at(900)

    def test_an_unparsable_activity_stamp_counts_from_creation(self) -> None:
        sandbox = make_sandbox(annotations={"openblox.sh/last-activity": "forever"})
        assert compute_expiry(sandbox, LIFETIME, now=at(0)).expires_at == at(900)

    def test_is_deterministic_between_now_and_the_deadline(self) -> None:
        sandbox = make_sandbox()
        assert compute_expiry(sandbox, LIFETIME, at(1)) == compute_expiry(
            sandbox, LIFETIME, at(899)
        )

    def test_refuses_a_naive_now(self) -> None:
        with pytest.raises(ValueError, match="aware"):
            compute_expiry(make_sandbox(), LIFETIME, now=at(0).replace(tzinfo=None))
