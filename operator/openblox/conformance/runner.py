"""Run properties against targets, each under a deadline, and collect the scorecard.

Rules: a property whose tier the backend declares unsupported is *unsupported* with the
backend's reason; anything else that cannot be carried out (the backend cannot create a
sandbox, a canary will not start, an exec breaks) is a FAIL with the reason; a property
still running at its deadline is a FAIL and the run goes on without it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from openblox.conformance.backend import Backend
from openblox.conformance.backends import load_backend
from openblox.conformance.checks import CHECKS
from openblox.conformance.cluster_api import Kube, message_of
from openblox.conformance.context import CannotRun, Context, Environment, Verdict
from openblox.conformance.properties import PROPERTIES, Property, select
from openblox.conformance.scorecard import Result, Scorecard, Status, Target
from openblox.conformance.settings import Settings

NO_PROFILE = "none"
"""The profile name for backends that have none (bare-runc): the column is the backend."""

missing = [p.id for p in PROPERTIES if p.id not in CHECKS]
if missing:  # pragma: no cover - a packaging mistake, caught by the unit tests
    raise RuntimeError(f"properties without a check: {missing}")


def evaluate(ctx: Context, prop: Property) -> tuple[Status, str]:
    """One property, under its deadline; never raises."""
    if prop.requires is not None and prop.requires in ctx.backend.unsupported:
        return Status.UNSUPPORTED, ctx.backend.unsupported[prop.requires]
    outcome: dict[str, tuple[Status, str]] = {}

    def work() -> None:
        try:
            verdict: Verdict = CHECKS[prop.id](ctx)
            outcome["r"] = (Status.PASS if verdict.passed else Status.FAIL, verdict.evidence)
        except CannotRun as error:
            outcome["r"] = (Status.FAIL, f"could not run: {error}")
        except Exception as error:
            outcome["r"] = (Status.FAIL, f"could not run: {message_of(error)}")

    ctx.grace = 0.0
    thread = threading.Thread(target=work, name=f"property {prop.id}", daemon=True)
    started = time.monotonic()
    thread.start()
    while thread.is_alive():
        left = started + prop.deadline_seconds + ctx.extra_time() - time.monotonic()
        if left <= 0:
            break
        thread.join(min(left, 1.0))
    if thread.is_alive():
        return Status.FAIL, (
            f"no verdict within its {prop.deadline_seconds:.0f}s deadline: the property hung "
            "and was abandoned"
        )
    return outcome["r"]


class TargetRun:
    """One backend + profile: a column of the scorecard."""

    def __init__(self, environment: Environment, backend: Backend, profile: str) -> None:
        self.context = Context(environment, backend, profile)
        name = backend.name if profile == NO_PROFILE else f"{backend.name}/{profile}"
        self.target = Target(name=name, backend=backend.name, profile=profile)
        self._described = False
        self._warm = False

    def warm_up(self) -> None:
        """Make the shared sandbox and the canaries before the first property, outside any
        property's deadline (a failure is remembered and fails the properties needing it)."""
        if self._warm:
            return
        self._warm = True
        with contextlib.suppress(CannotRun):
            self.context.sandbox()
            self.context.canaries()

    def run(self, prop: Property) -> Result:
        if not (prop.requires and prop.requires in self.context.backend.unsupported):
            self.warm_up()
        started = time.monotonic()
        status, evidence = evaluate(self.context, prop)
        self._describe()
        self._note_canaries()
        return Result(prop.id, self.target.name, status, evidence, time.monotonic() - started)

    def _describe(self) -> None:
        """Note what the shared sandbox really was (once it exists)."""
        if self._described or self.context._shared is None:
            return
        self._described = True
        pod = self.context.pod() or {}
        spec = pod.get("spec") or {}
        containers = spec.get("containers") or [{}]
        if pod:
            self.target.notes.append(
                f"pod runtimeClassName {spec.get('runtimeClassName') or '(default: runc)'}, "
                f"image {containers[0].get('image')}"
            )
        info = ((self.context.node() or {}).get("status") or {}).get("nodeInfo") or {}
        if info:
            self.target.notes.append(
                f"node kernel {info.get('kernelVersion')}, {info.get('containerRuntimeVersion')}"
            )
        limits = self.context._shared.limits
        self.target.notes.append(
            "declared limits: "
            + ", ".join(f"{k} {v}" for k, v in vars(limits).items() if v is not None)
            if any(v is not None for v in vars(limits).values())
            else "declared limits: none"
        )

    def _note_canaries(self) -> None:
        """What the canaries went through on the way up (a pod the kubelet refused)."""
        canaries = self.context.environment.started_canaries
        for note in canaries.notes if canaries else ():
            line = f"canary: {note}"
            if line not in self.target.notes:
                self.target.notes.append(line)

    def close(self) -> None:
        self.context.close()


def cluster_facts(kube: Kube) -> dict[str, str]:
    facts: dict[str, str] = {}
    with contextlib.suppress(Exception):
        facts["kubernetes"] = str(kube.api.get("/version")["gitVersion"])
    return facts


class ConformanceRun:
    """A run in progress: one backend, its profiles as targets, results as they come.

    ``run_suite`` drives one from start to end; the pytest plugin drives one test at a
    time. ``close`` tears everything down and returns the scorecard.
    """

    def __init__(self, settings: Settings, *, kube: Kube | None = None) -> None:
        self.settings = settings
        self.kube = kube or Kube.connect(settings.kubeconfig)
        self._started = time.monotonic()
        self.card = Scorecard(started=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
        self.card.cluster = cluster_facts(self.kube)
        self.environment = Environment(self.kube, settings)
        self.backend = load_backend(settings.backend, self.kube, settings)
        self.setup_error: str | None = None
        try:
            self.backend.setup(self.environment.run_id)
        except Exception as error:
            self.setup_error = f"backend setup failed: {message_of(error)}"
        self._runs: dict[str, TargetRun] = {}
        self._current: TargetRun | None = None

    def run(self, profile: str, prop: Property) -> Result:
        run = self._runs.get(profile)
        if run is None:
            # One target at a time: the previous one's sandboxes go before the next starts.
            if self._current is not None:
                self._current.close()
            run = self._runs[profile] = TargetRun(self.environment, self.backend, profile)
            self.card.targets.append(run.target)
            self._current = run
        unsupported = prop.requires is not None and prop.requires in self.backend.unsupported
        if self.setup_error and not unsupported:
            result = Result(prop.id, run.target.name, Status.FAIL, self.setup_error)
        else:
            result = run.run(prop)
        self.card.add(result)
        return result

    def close(self) -> Scorecard:
        try:
            for run in self._runs.values():
                run.close()
        finally:
            try:
                self.backend.teardown()
            finally:
                self.environment.close()
        self.card.seconds = time.monotonic() - self._started
        return self.card


def run_suite(
    settings: Settings,
    *,
    kube: Kube | None = None,
    properties: Sequence[Property] | None = None,
    on_result: Callable[[Result], None] | None = None,
) -> Scorecard:
    """Run the chosen properties against every profile of one backend; always returns a
    scorecard (a setup failure makes every property fail with its reason)."""
    chosen = list(properties) if properties is not None else list(select(settings.only))
    session = ConformanceRun(settings, kube=kube)
    try:
        for profile in settings.profiles:
            for prop in chosen:
                result = session.run(profile, prop)
                if on_result:
                    on_result(result)
    finally:
        card = session.close()
    return card
