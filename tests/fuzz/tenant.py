"""What a tenant writes on its own Sandbox's metadata, through the operator's reconcile
and reaper (the real code, against the recording fake API server of the unit tests).

A tenant may put any label and annotation on its Sandbox, and finalizers too; the
operator reads one of them (`openblox.sh/last-activity`) and must survive the rest.
Every case is one generated Sandbox beside a witness Sandbox of another tenant that
comes due at the same second, so both fall in the reaper's same pass. The oracle:
nothing escapes the reconcile or the pass; the witness is reaped at its deadline
whatever the generated one holds; the generated one is reaped no later than its max age
(which needs no cooperation), and no later than its idle deadline from creation when
its stamp does not parse (a bad stamp may shorten a life, never lengthen it).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from hypothesis import strategies as st

from openblox.models import SandboxError, parse_sandbox
from openblox.names import (
    ANNOTATION_BOUNDARY,
    ANNOTATION_LAST_ACTIVITY,
    ANNOTATION_PROCESSES,
    ANNOTATION_PROFILE_DIGEST,
    ANNOTATION_RUNSC_OCI_SECCOMP,
    LABEL_MANAGED_BY,
    LABEL_POOL,
    LABEL_PROFILE,
    LABEL_SANDBOX,
    LABEL_UNVERIFIED,
)
from tests.fuzz.oracle import Violation
from tests.fuzz.runner import Surface
from tests.unit.factories import CREATED, sandbox_body
from tests.unit.test_operator_loop import FakeKube, _operator, _reaper, _uid, _watch_everything

IDLE = 60
MAX_AGE = 300
SANDBOXES = "/apis/openblox.sh/v1alpha1/namespaces/team-a/sandboxes"

KEYS = st.one_of(
    st.sampled_from(
        [
            ANNOTATION_LAST_ACTIVITY,
            ANNOTATION_BOUNDARY,
            ANNOTATION_PROFILE_DIGEST,
            ANNOTATION_PROCESSES,
            ANNOTATION_RUNSC_OCI_SECCOMP,
            LABEL_SANDBOX,
            LABEL_PROFILE,
            LABEL_POOL,
            LABEL_UNVERIFIED,
            LABEL_MANAGED_BY,
            "kubectl.kubernetes.io/last-applied-configuration",
            "openblox.sh/",
            "openblox.sh/last-activity ",
        ]
    ),
    st.text(max_size=40),
)
_EDGES_OF_THE_CALENDAR = [
    "0001-01-01T00:00:00+01:00",
    "0001-01-01T00:00:00-23:59",
    "0001-01-01T00:00:00Z",
    "9999-12-31T23:59:59-01:00",
    "9999-12-31T23:59:59+23:59",
    "9999-12-31T23:59:59.999999999Z",
    "2025-01-02T03:04:05.1234567890123456789Z",
    "2025-01-02T23:59:60Z",
    "2025-02-29T00:00:00Z",
    "2025-01-02t03:04:05z",
    "0000-01-01T00:00:00Z",
    "2025-01-02T03:04:05+24:00",
    "2025-01-02T03:04:05-00:00",
]
STAMPS = st.one_of(
    st.sampled_from(_EDGES_OF_THE_CALENDAR),
    st.datetimes(timezones=st.timezones()).map(lambda d: d.isoformat()),
    st.from_regex(
        r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,30})?(Z|[+-]\d{2}:\d{2})", fullmatch=True
    ),
    st.text(max_size=64),
    st.integers(min_value=1, max_value=200_000).map(lambda n: "2" * n),
)
VALUES = st.one_of(
    STAMPS, st.text(max_size=300), st.sampled_from(["", "gvisor", "none", "-1", "1e999"])
)
METADATA = st.tuples(
    st.dictionaries(KEYS, VALUES, max_size=6),  # labels
    st.dictionaries(KEYS, VALUES, max_size=6),  # annotations
    st.one_of(st.none(), STAMPS),  # the activity stamp itself, on top
    st.lists(st.text(max_size=30), max_size=3),  # finalizers
    st.booleans(),  # being deleted (its finalizers hold it)
    st.integers(min_value=0, max_value=MAX_AGE + 30),  # seconds from creation to the pass
)


def _witness_and_case(
    labels: dict[str, str],
    annotations: dict[str, str],
    stamp: str | None,
    finalizers: list[str],
    deleting: bool,
) -> tuple[dict[str, Any], dict[str, Any]]:
    witness = sandbox_body(name="witness", uid=_uid("witness"), spec={"idleTimeoutSeconds": IDLE})
    if stamp is not None:
        annotations = {**annotations, ANNOTATION_LAST_ACTIVITY: stamp}
    case = sandbox_body(
        name="case",
        uid=_uid("case"),
        spec={"idleTimeoutSeconds": IDLE, "maxAgeSeconds": MAX_AGE},
        annotations=annotations,
    )
    case["metadata"]["labels"] = labels
    if finalizers:
        case["metadata"]["finalizers"] = finalizers
    if deleting:
        case["metadata"]["deletionTimestamp"] = "2025-01-02T03:05:00Z"
    return witness, case


def check_tenant_metadata(drawn: tuple[Any, ...]) -> str:
    labels, annotations, stamp, finalizers, deleting, pass_after = drawn
    witness_body, case_body = _witness_and_case(labels, annotations, stamp, finalizers, deleting)
    try:
        case = parse_sandbox(case_body)
    except SandboxError:
        return "refused: SandboxError"
    kube = FakeKube()
    reconciler, watched, cache = _operator(kube)
    _watch_everything(watched)
    moment = [_at(1)]
    reconciler._clock = lambda: moment[0]
    for body in (case_body, witness_body):
        kube.objects[f"{SANDBOXES}/{body['metadata']['name']}/status"] = body
        cached = cache.upsert(body)
        if cached is None:
            raise Violation("crash", f"the cache dropped a parsed Sandbox {body['metadata']}")
        reconciler.reconcile(cached, "sandbox")
    reaper = _reaper(kube, reconciler, cache, election=_Leading(), clock=lambda: moment[0])
    kube.take()
    # A pass at the witness's deadline (the case's too when its stamp does not count),
    # one at the drawn moment, then the sweep at max age.
    moment[0] = _at(IDLE)
    reaper.reap_due()
    reaped = _deleted(kube.take())
    if "witness" not in reaped:
        raise Violation("crash", "the witness was not reaped at its deadline beside this case")
    if not deleting and case.last_activity is None and "case" not in reaped:
        raise Violation("weaker", "a stamp that does not count kept it past its idle deadline")
    moment[0] = max(moment[0], _at(pass_after))
    reaper.reap_due()
    moment[0] = _at(MAX_AGE)
    reaper.reap_once()
    reaped |= _deleted(kube.take())
    if deleting:
        if "case" in reaped:
            raise Violation("crash", "a Sandbox already being deleted was deleted again")
        return "being deleted: left to its finalizers"
    if "case" not in reaped:
        raise Violation("weaker", f"outlived its max age ({MAX_AGE} s)")
    if case.last_activity is None:
        return "reaped; the stamp counted as no activity"
    return "reaped; the stamp counted"


class _Leading:
    leading = True


def _deleted(calls: list[tuple[str, str]]) -> set[str]:
    return {
        target.rsplit("/", 1)[1]
        for method, target in calls
        if method == "DELETE" and target.startswith(f"{SANDBOXES}/")
    }


def _at(seconds: float) -> datetime:
    return CREATED + timedelta(seconds=seconds)


TENANT_METADATA = Surface(
    "tenant metadata (reconcile and reaper)",
    "generated labels, annotations, activity stamps and finalizers on a Sandbox -> the "
    "operator's reconcile and the reaper's pass, beside another tenant's Sandbox due at "
    "the same second",
    METADATA,
    check_tenant_metadata,
)
SURFACES = (TENANT_METADATA,)
