"""Create → Ready: a Sandbox through the operator against the same pod applied directly,
bare pods under runc and gVisor, and `docker run --runtime runsc` with openblox's flags.

Every kind is created in turn (round robin), so drift in the machine's load spreads over
all of them alike; each is deleted, and gone, before the next create starts.
"""

from __future__ import annotations

import contextlib
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

from bench import docker as docker_mod
from bench import env
from bench.cluster_side import (
    SMALL_PROFILE,
    Kube,
    WatchRecorder,
    bare_pod,
    bench_profiles,
    delete_namespace,
    direct_pod,
    make_namespace,
    node_capacity,
    pods_path,
    use_bench_profiles,
)
from bench.results import Section
from openblox.client import Client
from openblox.transport import ApiError

TITLES = {
    "create": "Create → Ready: Sandbox vs the same pod applied directly vs bare pods vs Docker"
}
KINDS = ("bare_runc", "bare_gvisor", "direct_pod", "sandbox", "docker_runsc")
LABELS = {
    "bare_runc": "bare pod, runc",
    "bare_gvisor": "bare pod, gVisor",
    "direct_pod": "operator's pod spec applied directly (gVisor, hardened)",
    "sandbox": "Sandbox via operator + client.create",
    "docker_runsc": "docker run --runtime runsc (openblox flags)",
}
READY_TIMEOUT = 180.0


class Harness:
    def __init__(self, ctx: Any, section: Section) -> None:
        self.ctx = ctx
        self.kube: Kube = ctx.kube
        rid = ctx.run_id
        self.ns_pods = make_namespace(self.kube, f"obx-bench-create-pods-{rid}", sandboxes=False)
        ctx.cleanup(delete_namespace, self.kube, self.ns_pods)
        self.ns_sbx = make_namespace(self.kube, f"obx-bench-create-sbx-{rid}", sandboxes=True)
        ctx.cleanup(delete_namespace, self.kube, self.ns_sbx)
        self.client = Client(self.ns_sbx, kubeconfig=env.KUBECONFIG)
        self.pods_plain = WatchRecorder(self.kube, self.ns_pods, "pods")
        self.pods_sbx = WatchRecorder(self.kube, self.ns_sbx, "pods")
        self.sandboxes = WatchRecorder(self.kube, self.ns_sbx, "sandboxes")
        for watch in (self.pods_plain, self.pods_sbx, self.sandboxes):
            ctx.cleanup(watch.close)
        self.docker = docker_mod.shared(ctx)
        if self.docker.problem:
            section.notes.append(f"docker baseline not measured: {self.docker.problem}")
        else:
            section.notes.extend(n for n in self.docker.notes if n not in section.notes)

    def kinds(self) -> list[str]:
        return [k for k in KINDS if k != "docker_runsc" or not self.docker.problem]

    # ------------------------------------------------------------------ one create

    def create(self, kind: str, name: str) -> dict[str, float]:
        """Creates one of `kind` and returns its timings in ms (total = to Ready)."""
        if kind == "docker_runsc":
            started = time.monotonic()
            self.docker.run(
                *docker_mod.idle_container(name, "create", memory="128m", cpus="0.1"),
                timeout=READY_TIMEOUT,
            )
            return {"total": (time.monotonic() - started) * 1000}
        if kind == "sandbox":
            started = time.monotonic()
            self.client.create(SMALL_PROFILE, name=name, timeout=READY_TIMEOUT)
            returned = time.monotonic()
            sbx = self.sandboxes.wait(name, "added", 10)
            pod_added = self.pods_sbx.wait(name, "added", 10)
            pod_ready = self.pods_sbx.wait(name, "ready", 10)
            sbx_ready = self.sandboxes.wait(name, "ready", 10)
            return {
                "total": (returned - started) * 1000,
                "operator_overhead": (pod_added - sbx) * 1000,
                "pod_added_to_ready": (pod_ready - pod_added) * 1000,
                "pod_ready_to_sandbox_ready": (sbx_ready - pod_ready) * 1000,
                "sandbox_ready_to_client": (returned - sbx_ready) * 1000,
            }
        if kind == "direct_pod":
            namespace, watch = self.ns_sbx, self.pods_sbx
            body = direct_pod(name, namespace, SMALL_PROFILE, bench_profiles()[SMALL_PROFILE])
        else:
            namespace, watch = self.ns_pods, self.pods_plain
            body = bare_pod(name, "gvisor" if kind == "bare_gvisor" else None, kind=kind)
        started = time.monotonic()
        self.kube.request("POST", pods_path(namespace), body)
        ready = watch.wait(name, "ready", READY_TIMEOUT, fail="failed")
        marks = watch.marks[name]
        return {
            "total": (ready - started) * 1000,
            "to_scheduled": (marks.get("scheduled", ready) - started) * 1000,
            "scheduled_to_ready": (ready - marks.get("scheduled", ready)) * 1000,
        }

    def delete(self, kind: str, names: list[str]) -> None:
        """Deletes, then waits until each is gone (pods included), so nothing overlaps."""
        if kind == "docker_runsc":
            with contextlib.suppress(RuntimeError):
                self.docker.run("rm", "-f", *names, timeout=300)
            return
        for name in names:
            with contextlib.suppress(ApiError):
                if kind == "sandbox":
                    self.client.delete(name)
                else:
                    namespace = self.ns_sbx if kind == "direct_pod" else self.ns_pods
                    self.kube.request(
                        "DELETE", f"{pods_path(namespace)}/{name}", params={"gracePeriodSeconds": 0}
                    )
        watch = self.pods_plain if kind in ("bare_runc", "bare_gvisor") else self.pods_sbx
        for name in names:
            with contextlib.suppress(TimeoutError):
                watch.wait(name, "deleted", 120)
            if kind == "sandbox":
                with contextlib.suppress(TimeoutError):
                    self.sandboxes.wait(name, "deleted", 60)


SHORT = {
    "bare_runc": "rc",
    "bare_gvisor": "gv",
    "direct_pod": "dp",
    "sandbox": "sb",
    "docker_runsc": "dk",
}


def _concurrently(calls: list[Callable[[], dict[str, float]]]) -> list[dict[str, float] | str]:
    results: list[dict[str, float] | str] = ["not run"] * len(calls)
    barrier = threading.Barrier(len(calls))

    def one(index: int) -> None:
        barrier.wait()
        try:
            results[index] = calls[index]()
        except Exception as error:
            results[index] = f"{type(error).__name__}: {error}"

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def run(ctx: Any, section: Section) -> None:
    use_bench_profiles(ctx)
    harness = Harness(ctx, section)
    kinds = harness.kinds()
    sequential = ctx.n(20, 2)
    concurrency = ctx.n(10, 3)
    free = node_capacity(ctx.kube)["cpu_free_m"]
    if free < concurrency * 105:
        section.notes.append(
            f"only {free:.0f}m of CPU requests were free when the concurrent rounds were "
            f"planned; {concurrency} bench-small pods need {concurrency * 105}m, so some "
            "waited for other sessions' pods to go (it shows in their create time)"
        )
    rounds = ctx.n(2, 1)
    errors: list[str] = []

    # Warm-up, not recorded: the first of each kind pays one-time costs (the operator
    # preparing a namespace, containerd's first snapshot of an image in a runtime).
    for kind in kinds:
        name = f"warm-{SHORT[kind]}"
        try:
            harness.create(kind, name)
        except Exception as error:
            errors.append(f"warm-up {kind}: {error}")
        harness.delete(kind, [name])

    seq: dict[str, list[dict[str, float]]] = {k: [] for k in kinds}
    for index in range(sequential):
        for kind in kinds:
            if kind.startswith("bare_") and index % 2 and not ctx.quick:
                continue  # bare pods: every other round (10 of 20) keeps the run short
            name = f"s{index}-{SHORT[kind]}"
            try:
                seq[kind].append(harness.create(kind, name))
            except Exception as error:
                errors.append(f"sequential {kind} {name}: {error}")
            harness.delete(kind, [name])
        ctx.log(f"create: sequential {index + 1}/{sequential}")

    conc: dict[str, list[dict[str, float]]] = {k: [] for k in kinds}
    for round_index in range(rounds):
        for kind in kinds:
            names = [f"c{round_index}-{SHORT[kind]}-{i}" for i in range(concurrency)]
            outcomes = _concurrently(
                [lambda n=n, k=kind: harness.create(k, n) for n in names]  # type: ignore[misc]
            )
            for name, outcome in zip(names, outcomes, strict=True):
                if isinstance(outcome, str):
                    errors.append(f"concurrent {kind} {name}: {outcome}")
                else:
                    conc[kind].append(outcome)
            harness.delete(kind, names)
        ctx.log(f"create: concurrent round {round_index + 1}/{rounds}")

    _record(section, "seq", "sequential", seq)
    _record(section, f"conc{concurrency}", f"{concurrency} at once", conc)
    cpu_sweep(ctx, harness, section, errors)
    if errors:
        section.notes.append(f"{len(errors)} creates failed: " + "; ".join(errors[:10]))
    section.notes.append(
        f"Profile `{SMALL_PROFILE}` (cpu 100m, memory 128Mi, scratch 16Mi, gVisor; the pod "
        "requests 105m/160Mi with the RuntimeClass overhead) for the Sandbox and the direct "
        "pod, so ten fit next to other sessions' pods on this 2-core node; bare pods have "
        "no limits and no hardening; the Docker container gets openblox's flags with the "
        "same limits (--memory 128m --cpus 0.1)."
    )
    section.notes.append(
        "Sandbox time runs from client.create() being called to it returning (it waits on "
        "a watch for Ready=True, which the operator sets after the pod is Ready and a "
        "probe exec inside it has seen the gVisor kernel). Pod times run from the POST to "
        "the watch reporting the pod Ready. `docker run -d` returns once the container "
        "has started. Breakdowns are stamped when this process receives each watch event."
    )


# Where a Sandbox's create time goes: (figure, sample, title, legend), in order.
BREAKDOWN = (
    (
        "operator_overhead",
        "operator_overhead",
        "operator overhead, {label}: Sandbox seen → its pod seen",
        "Sandbox ADDED → pod ADDED (operator)",
    ),
    (
        "pod_to_ready",
        "pod_added_to_ready",
        "Sandbox's pod, {label}: pod seen → pod Ready",
        "pod ADDED → pod Ready (scheduler, kubelet, runsc)",
    ),
    (
        "probe_and_status",
        "pod_ready_to_sandbox_ready",
        "Sandbox, {label}: pod Ready → Sandbox Ready (boundary probe exec + status)",
        "pod Ready → Sandbox Ready (probe exec, status patch)",
    ),
    (
        "client_notice",
        "sandbox_ready_to_client",
        "Sandbox, {label}: Sandbox Ready (our watch) → client.create returns",
        "Sandbox Ready → client.create() returns",
    ),
)


def _record(
    section: Section, key: str, label: str, data: dict[str, list[dict[str, float]]]
) -> None:
    floor = f"create.{key}.bare_runc"
    baselines = {
        "bare_runc": None,
        "bare_gvisor": f"create.{key}.bare_runc",
        "direct_pod": f"create.{key}.bare_gvisor",
        "sandbox": f"create.{key}.direct_pod",
        "docker_runsc": f"create.{key}.bare_gvisor",
    }
    for kind, samples in data.items():
        if not samples:
            continue
        section.figure(
            f"create.{key}.{kind}",
            f"create→Ready, {label}: {LABELS[kind]}",
            "ms",
            [s["total"] for s in samples],
            baseline=baselines[kind],
            floor=None if kind == "bare_runc" else floor,
            group=f"create-{key}",
            group_title=f"Create → Ready, {label}",
            label=LABELS[kind],
            headline=kind in ("sandbox",),
        )
    sandbox = data.get("sandbox") or []
    for index, (name, sample, title, legend) in enumerate(BREAKDOWN if sandbox else ()):
        # The figure's extras (`**extra` of Section.figure), in the order the results hold
        # them; only the group's first figure carries its title and the headline mark.
        extra: dict[str, Any] = {"group": f"breakdown-{key}"}
        if index == 0:
            extra["group_title"] = f"Where a Sandbox's create time goes, {label}"
        extra["label"] = legend
        if index == 0:
            extra["headline"] = True
        section.figure(
            f"create.{key}.{name}",
            title.format(label=label),
            "ms",
            [s[sample] for s in sandbox],
            **extra,
        )


# 1m is left out: its pod takes over a minute to start, and the operator's 30 s boundary
# probe cannot finish inside so throttled a Sentry, so a Sandbox never becomes Ready.
SWEEP_CPUS = ("10m", "50m", "100m", "500m")


def cpu_sweep(
    ctx: Any, harness: Harness, section: Section, errors: list[str]
) -> dict[str, list[float]]:
    """The direct pod's create→Ready as its CPU limit (= request) grows."""
    from bench.cluster_side import profile_yaml

    results: dict[str, list[float]] = {}
    waits: list[str] = []
    for index in range(ctx.n(2, 1)):
        for cpu in SWEEP_CPUS:
            if cpu == "10m" and index > 0:
                continue  # ~35 s each: one is enough to see it
            name = f"cpu{cpu}-{index}"
            body = direct_pod(name, harness.ns_sbx, f"sweep-{cpu}", profile_yaml(cpu, "128Mi"))
            started = time.monotonic()
            try:
                harness.kube.request("POST", pods_path(harness.ns_sbx), body)
                ready = harness.pods_sbx.wait(name, "ready", 300, fail="failed")
                scheduled = harness.pods_sbx.marks[name].get("scheduled", started)
                # From scheduling: a pod that waited for other sessions' pods to free CPU
                # requests would otherwise count that wait as boot time.
                results.setdefault(cpu, []).append((ready - scheduled) * 1000)
                if scheduled - started > 2:
                    waits.append(f"{cpu}: {scheduled - started:.0f} s")
            except Exception as error:
                errors.append(f"cpu sweep {cpu}: {error}")
            with contextlib.suppress(ApiError):
                harness.kube.request("DELETE", f"{pods_path(harness.ns_sbx)}/{name}")
            with contextlib.suppress(TimeoutError):
                harness.pods_sbx.wait(name, "deleted", 120)
        ctx.log(f"create: cpu sweep {index + 1}")
    for cpu, samples in results.items():
        section.figure(
            f"create.cpu.{cpu}",
            f"scheduled→Ready of the direct pod with a CPU limit of {cpu} (+5m overhead)",
            "ms",
            samples,
            baseline="create.cpu.500m" if cpu != "500m" else None,
            group="cpu-sweep",
            group_title="Direct pod create→Ready against the profile's CPU limit",
            label=f"cpu {cpu}",
            log=True,
        )
    if waits:
        section.notes.append(
            "CPU sweep pods that waited to be scheduled (node CPU requests full): "
            + ", ".join(waits)
        )
    section.series["cpu_curve"] = {
        "title": "create→Ready against the profile's CPU limit (requests == limits)",
        "xlabel": "CPU limit (millicores, before the 5m RuntimeClass overhead)",
        "ylabel": "ms (median)",
        "logy": True,
        "lines": {
            "direct pod, gVisor": [
                [int(cpu.removesuffix("m")), statistics.median(v)] for cpu, v in results.items()
            ]
        },
    }
    return results
