"""The surfaces that need the real API server and operator: Sandbox specs (structural
schema, CEL, the admission policies, then the operator's reconcile) and profile entries
in the admins' ConfigMap (the operator's profile watch).

Each generated Sandbox is created in a namespace of the run's own; it must be refused
with a 4xx and a clear message, or be reconciled (observedGeneration caught up, a Ready
condition with a clear message) and, where a pod exists, the pod must be no weaker than
the profile as the operator parses it from the live ConfigMap. Around the run the
operator pod must keep its uid and restart count, and still bring a good Sandbox to
Ready at the end.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import time
from collections.abc import Iterator
from typing import Any

import yaml
from hypothesis import strategies as st

from openblox.client.cluster import sandboxes_path
from openblox.conformance.cluster_api import Kube
from openblox.models import ProfileError, parse_profile
from openblox.names import GROUP, LABEL_SANDBOX, VERSION
from openblox.timestamps import parse_timestamp
from openblox.transport import MERGE_PATCH, STRATEGIC_MERGE_PATCH, ApiError, path
from tests.fuzz import tenant
from tests.fuzz.oracle import Violation, clear, weaknesses
from tests.fuzz.pure import PROFILE_DOCUMENTS, SCALARS, SPEC_FIELD, TIMESTAMPS, VALUES
from tests.fuzz.runner import Surface

SYSTEM = "openblox-system"
FUZZ_PROFILE = "test-fuzz"
# The shipped profile's fields at the least that boots, so accepted cases cost the node
# little; the oracle compares against whatever the live ConfigMap says.
FUZZ_PROFILE_FIELDS = {
    "runtimeClassName": "gvisor",
    "resources": {"cpu": "10m", "memory": "96Mi", "scratch": "16Mi", "processes": 64},
    "lifetime": {"idleTimeoutSeconds": 600, "maxAgeSeconds": 1200},
}
RECONCILE_SECONDS = 30.0


class Operator:
    """What must not change while the operator is fed garbage: its pod and restarts."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.before = self.snapshot()

    def snapshot(self) -> list[tuple[str, int]]:
        pods = self.kube.api.get(
            path(plural="pods", namespace=SYSTEM),
            labelSelector="app.kubernetes.io/name=openblox-operator",
        )["items"]
        return sorted(
            (
                p["metadata"]["uid"],
                sum(
                    c["restartCount"]
                    for c in (p.get("status") or {}).get("containerStatuses") or []
                ),
            )
            for p in pods
        )

    def crashes(self) -> int:
        """Restarts and replaced pods since the start (0 when it held)."""
        after = dict(self.snapshot())
        lost = [uid for uid, _ in self.before if uid not in after]
        restarts = sum(after[uid] - count for uid, count in self.before if uid in after)
        return len(lost) + restarts


class FuzzNamespace:
    """An opted-in namespace and the fuzz profile, for the length of a run."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.name = f"fuzz-{secrets.token_hex(3)}"

    @contextlib.contextmanager
    def open(self) -> Iterator[FuzzNamespace]:
        api = self.kube.api
        api.post(
            path(plural="namespaces"),
            {"metadata": {"name": self.name, "labels": {"openblox.sh/sandboxes": "enabled"}}},
        )
        _patch_profiles(self.kube, {FUZZ_PROFILE: _fuzz_profile_yaml(self.kube)})
        try:
            _wait(lambda: FUZZ_PROFILE in _admission_profiles(self.kube), 60, "the fuzz profile")
            yield self
        finally:
            _patch_profiles(self.kube, {FUZZ_PROFILE: None})
            with contextlib.suppress(ApiError):
                api.request(
                    "DELETE",
                    path(plural="namespaces", name=self.name),
                    params={"propagationPolicy": "Background"},
                )

    def profile(self) -> Any:
        data = _configmap(self.kube, "openblox-profiles").get("data") or {}
        return parse_profile(FUZZ_PROFILE, data[FUZZ_PROFILE])


def _patch_profiles(kube: Kube, data: dict[str, str | None]) -> None:
    kube.api.patch(
        path(plural="configmaps", namespace=SYSTEM, name="openblox-profiles"),
        {"data": data},
        STRATEGIC_MERGE_PATCH,
    )


def _fuzz_profile_yaml(kube: Kube) -> str:
    """The fuzz profile, on the image the installed code-exec profile pins."""
    shipped = parse_profile("code-exec", _configmap(kube, "openblox-profiles")["data"]["code-exec"])
    return yaml.safe_dump({"image": shipped.image, **FUZZ_PROFILE_FIELDS})


def _configmap(kube: Kube, name: str) -> dict[str, Any]:
    return kube.api.get(path(plural="configmaps", namespace=SYSTEM, name=name))


def _admission_profiles(kube: Kube) -> set[str]:
    with contextlib.suppress(ApiError):
        params = _configmap(kube, "openblox-profile-admission")
        return set((params.get("data") or {}).keys())
    return set()


def _wait(probe: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result := probe():
            return result
        time.sleep(0.3)
    raise Violation("crash", f"timed out after {timeout:.0f}s waiting for {what}")


# --- Sandbox specs through the API server --------------------------------------------------

NAMES = st.one_of(
    st.from_regex(r"[a-z][a-z0-9-]{0,20}[a-z0-9]", fullmatch=True),
    st.from_regex(r"[a-z]{1,5}\.[a-z]{1,5}", fullmatch=True),
    st.from_regex(r"[a-z]{64,70}", fullmatch=True),
    st.text(max_size=12),
)
SPECS = st.builds(
    lambda profile, idle, age, extra: (
        {
            k: v
            for k, v in {
                "profile": profile,
                "idleTimeoutSeconds": idle,
                "maxAgeSeconds": age,
            }.items()
            if v is not None
        }
        | extra
    ),
    st.one_of(
        st.just(FUZZ_PROFILE),
        st.just(FUZZ_PROFILE),
        st.sampled_from(["no-such-profile", "Code-Exec", ""]),
        SCALARS,
    ),
    SPEC_FIELD,
    SPEC_FIELD,
    st.dictionaries(
        st.sampled_from(["image", "runtimeClassName", "securityContext", "user", "hostNetwork"]),
        VALUES,
        max_size=2,
    ),
)
# What a tenant may write on the Sandbox's metadata: labels the API server mostly takes
# (valid syntax, the operator's own keys among them) and annotations of any kind. Label
# values stay short: the API server quotes an invalid one whole in its refusal, and a
# 200 KB value would only measure Kubernetes' wording (it never reaches the operator).
LABEL_VALUES = st.one_of(
    st.from_regex(r"([a-z0-9]([-a-z0-9_.]{0,61}[a-z0-9])?)?", fullmatch=True),
    tenant.VALUES.filter(lambda value: len(value) <= 256),
)
LABELS = st.dictionaries(
    st.one_of(tenant.KEYS, st.from_regex(r"[a-z]{1,10}\.sh/[a-z-]{1,20}", fullmatch=True)),
    LABEL_VALUES,
    max_size=4,
)
ANNOTATIONS = st.dictionaries(tenant.KEYS, tenant.VALUES, max_size=4)
SANDBOX_CASES = st.tuples(
    NAMES,
    st.one_of(SPECS, VALUES),
    st.one_of(st.none(), TIMESTAMPS, tenant.STAMPS),
    st.one_of(st.none(), st.dictionaries(st.text(max_size=8), VALUES, max_size=2)),
    st.one_of(st.none(), LABELS),
    st.one_of(st.none(), ANNOTATIONS),
)


class SandboxSpecs:
    """The check for one generated Sandbox, bound to a run's namespace."""

    def __init__(self, kube: Kube, namespace: FuzzNamespace) -> None:
        self.kube = kube
        self.namespace = namespace
        self.profile = namespace.profile()
        # Accepted cases stay until `all_reaped`, so the reaper meets them together.
        self.kept: list[str] = []

    def __call__(self, case: tuple[str, Any, str | None, Any, Any, Any]) -> str:
        name, spec, stamp, status, labels, annotations = case
        body: dict[str, Any] = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Sandbox",
            "metadata": {"name": name, "namespace": self.namespace.name},
            "spec": spec,
        }
        if annotations is not None:
            body["metadata"]["annotations"] = dict(annotations)
        if stamp is not None:
            body["metadata"].setdefault("annotations", {})["openblox.sh/last-activity"] = stamp
        if labels is not None:
            body["metadata"]["labels"] = labels
        if status is not None:
            body["status"] = status
        try:
            created = self.kube.api.post(sandboxes_path(self.namespace.name), body)
        except ApiError as error:
            return _refusal(error)
        except ValueError as error:  # the client itself refuses to send it (e.g. a name)
            clear(str(error))
            return "refused by the client library"
        self.kept.append(created["metadata"]["name"])
        return self._judge(created)

    def _judge(self, created: dict[str, Any]) -> str:
        name = created["metadata"]["name"]
        generation = created["metadata"]["generation"]

        def reconciled() -> dict[str, Any] | None:
            body = self.kube.api.get(sandboxes_path(self.namespace.name, name))
            status = body.get("status") or {}
            ready = [c for c in status.get("conditions") or [] if c.get("type") == "Ready"]
            if status.get("observedGeneration") == generation and ready:
                return status
            return None

        status = _wait(reconciled, RECONCILE_SECONDS, f"the operator to reconcile {name}")
        ready = next(c for c in status["conditions"] if c.get("type") == "Ready")
        clear(str(ready.get("message") or ready.get("reason")))
        # By label, not by name: a pod from a warm pool keeps its own name.
        pods = self.kube.api.get(
            path(plural="pods", namespace=self.namespace.name),
            labelSelector=f"{LABEL_SANDBOX}={name}",
        )["items"]
        for pod in pods:
            found = weaknesses(pod, self.profile)
            if found:
                raise Violation("weaker", f"pod {pod['metadata']['name']}: {'; '.join(found)}")
        built = "pod built" if pods else "no pod"
        return f"accepted, {built} ({ready.get('reason')})"


def _refusal(error: ApiError) -> str:
    if not 400 <= error.status < 500:
        raise Violation("crash", f"the API server answered {error.status}: {error.body!r:.300}")
    try:
        message = str(json.loads(error.body or "{}").get("message") or "")
    except ValueError:
        message = str(error.body or "")
    clear(message)
    return f"refused: {error.status}"


def sandbox_surface(kube: Kube, namespace: FuzzNamespace) -> Surface:
    return Surface(
        "Sandbox specs (API server and operator)",
        "generated names, specs, labels, annotations and status -> create through the API "
        "server; every accepted one then reaped in one pass beside a witness",
        SANDBOX_CASES,
        SandboxSpecs(kube, namespace),
    )


# How late past their common deadline the reaper may delete them: a pass (1 s), the
# deletes and their watch events, on a busy node.
REAP_SLACK_SECONDS = 15.0


def all_reaped(kube: Kube, specs: SandboxSpecs, idle: int = 30) -> None:
    """Every accepted case and a witness come due at one second (each idle timeout
    shortened to it: a spec may only shorten), so the reaper's one pass meets whatever
    the cases carry; all must be gone by then, the witness above all."""
    namespace = specs.namespace.name
    witness = f"witness-{secrets.token_hex(3)}"
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Sandbox",
        "metadata": {"name": witness},
        "spec": {"profile": FUZZ_PROFILE, "idleTimeoutSeconds": idle},
    }
    made = kube.api.post(sandboxes_path(namespace), body)
    deadline = _created(made) + idle
    for name in specs.kept:
        with contextlib.suppress(ApiError):  # reaped already, by its own spec
            current = kube.api.get(sandboxes_path(namespace, name))
            left = int(deadline - _created(current))
            asked = (current.get("spec") or {}).get("idleTimeoutSeconds")
            if left >= 1 and not (isinstance(asked, int) and asked <= left):
                kube.api.patch(
                    sandboxes_path(namespace, name),
                    {"spec": {"idleTimeoutSeconds": left}},
                    MERGE_PATCH,
                )

    def left_over() -> list[str]:
        items = kube.api.get(sandboxes_path(namespace))
        return [i["metadata"]["name"] for i in items["items"] if i["metadata"]["name"] in
                {witness, *specs.kept}]  # fmt: skip

    while time.time() < deadline + REAP_SLACK_SECONDS:
        if not left_over():
            return
        time.sleep(1)
    late = left_over()
    raise Violation(
        "crash",
        f"{len(late)} Sandbox(es) outlived their deadline by {REAP_SLACK_SECONDS:.0f} s: "
        f"{', '.join(sorted(late))[:300]}",
    )


def _created(body: dict[str, Any]) -> float:
    return parse_timestamp(body["metadata"]["creationTimestamp"]).timestamp()


# --- profile entries in the live ConfigMap -------------------------------------------------


class ProfileEntries:
    """One generated entry under a key of its own; refused ones must get a ProfileRefused
    Event naming the key and stay out of admission, accepted ones must reach it."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.count = 0

    def __call__(self, document: str) -> str:
        self.count += 1
        key = f"fuzz-entry-{secrets.token_hex(3)}"
        try:
            parse_profile(key, document)
            expect_refusal = False
        except ProfileError:
            expect_refusal = True
        since = time.time()
        _patch_profiles(self.kube, {key: document})
        try:
            if expect_refusal:
                message = _wait(lambda: self._refused(key, since), 20, f"ProfileRefused for {key}")
                clear(message, must_mention=f'profile "{key}"')
                if key in _admission_profiles(self.kube):
                    raise Violation("weaker", f"refused profile {key} is admitted")
                return "refused: ProfileRefused"
            _wait(lambda: key in _admission_profiles(self.kube), 20, f"{key} admitted")
            return "accepted"
        finally:
            _patch_profiles(self.kube, {key: None})

    def _refused(self, key: str, since: float) -> str | None:
        events = self.kube.api.get(
            path(plural="events", namespace=SYSTEM),
            fieldSelector="involvedObject.name=openblox-profiles",
        )["items"]
        for event in events:
            message = event.get("message") or ""
            if event.get("reason") == "ProfileRefused" and f'profile "{key}"' in message:
                return str(message)
        return None


def profile_surface(kube: Kube) -> Surface:
    return Surface(
        "profile entries (live ConfigMap)",
        "generated entries patched into openblox-profiles -> the operator's profile watch",
        PROFILE_DOCUMENTS,
        ProfileEntries(kube),
    )


def still_serves(kube: Kube, namespace: FuzzNamespace, timeout: float = 120.0) -> None:
    """A good Sandbox still reaches Ready, and code-exec is still admitted."""
    if "code-exec" not in _admission_profiles(kube):
        raise Violation("crash", "code-exec is no longer admitted")
    name = f"after-{secrets.token_hex(3)}"
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Sandbox",
        "metadata": {"name": name},
        "spec": {"profile": FUZZ_PROFILE},
    }
    kube.api.post(sandboxes_path(namespace.name), body)

    def ready() -> bool:
        got = kube.api.get(sandboxes_path(namespace.name, name))
        return any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (got.get("status") or {}).get("conditions") or []
        )

    try:
        _wait(ready, timeout, f"{name} to be Ready after the run")
    finally:
        with contextlib.suppress(ApiError):
            kube.api.delete(sandboxes_path(namespace.name, name))
