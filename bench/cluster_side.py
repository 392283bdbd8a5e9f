"""The cluster side of the benchmarks: namespaces, pods, watches, profiles, the operator.

Watches and writes go over raw JSON (no typed models), through the project's transport
(`openblox.transport`, ADR 0018): the harness should cost as little client-side time as
it can, so the figures are the cluster's and not the harness's.
"""

from __future__ import annotations

import contextlib
import http.client
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from bench import env, page_share, procs
from openblox.builders.pod import build_pod
from openblox.models import Sandbox, SandboxSpec, parse_profile
from openblox.names import (
    GROUP,
    LABEL_NAMESPACE_OPT_IN,
    LABEL_SANDBOX,
    NAMESPACE_OPT_IN_VALUE,
    PLURAL,
    PROFILES_CONFIGMAP,
    VERSION,
)
from openblox.transport import Api, ApiError, Gone, NotFound, Session, is_conflict

BENCH_LABEL = "openblox.sh/bench"
ADMISSION_CONFIGMAP = "openblox-profile-admission"
# Each socket operation of a request (a watch has its own bound).
REQUEST_TIMEOUT_SECONDS = 60.0
# A watch request's span, which the API server ends; then the harness watches again.
WATCH_SECONDS = 120
# What `patiently` waits through: throttling and a restarting or overloaded API server.
RETRIED_STATUSES = (429, 500, 502, 503, 504)

# Profiles the benchmark adds to openblox-profiles for its run (and removes at the end).
# Sandbox pods have requests == limits (Guaranteed QoS) unless a profile sets cpuRequest
# (Burstable), and the gvisor RuntimeClass adds a fixed overhead of 5m CPU and 32Mi memory
# per pod. The Sentry runs inside the pod's CPU limit, so a limit of a few millicores
# throttles its boot to tens of seconds.


def profile_yaml(
    cpu: str,
    memory: str,
    *,
    scratch: str = "16Mi",
    runtime: str = "gvisor",
    cpu_request: str | None = None,
    max_age_seconds: int = 3600,
) -> str:
    request = f"cpuRequest: {cpu_request}, " if cpu_request else ""
    return (
        f"image: {env.pinned_sandbox_image()}\n"
        f"runtimeClassName: {runtime}\n"
        + ("unsafe: true\n" if runtime != "gvisor" else "")
        + f"resources: {{cpu: {cpu}, {request}memory: {memory}, scratch: {scratch}, "
        "processes: 128}\n"
        "exec: {timeoutSeconds: 60, outputBytes: 1048576}\n"
        f"lifetime: {{idleTimeoutSeconds: {min(3600, max_age_seconds)}, "
        f"maxAgeSeconds: {max_age_seconds}}}\n"
    )


# For creates: enough CPU that the Sentry boots without being throttled much, small
# enough that ten fit next to what other sessions run on this 2-core node.
SMALL_PROFILE = "bench-small"
# For idle density (memory per sandbox, scaling): close to the least a Sandbox can ask
# for. At 1m its pod takes over a minute to start and the operator's 30 s boundary probe
# does not finish inside the throttled Sentry, so it never becomes Ready; 10m (15m with
# the overhead) boots in about half a minute.
IDLE_PROFILE = "bench-idle"
# A profile whose RuntimeClass does not exist: every Sandbox naming it is reconciled to
# Ready=False/RuntimeUnavailable and never gets a pod. That is how 1,000 Sandboxes fit
# on a node where 1,000 pods never could.
NOPOD_PROFILE = "bench-nopod"
# For warm pools: Burstable like the shipped code-exec (limit 500m, a small request), so a
# cold create and a refill boot at code-exec's speed while a pool of 20 and its refill
# still fit beside other sessions' pods; small memory for the same reason.
POOL_PROFILE = "bench-pool"
# For the scale section: pods bound to simulated nodes, through a RuntimeClass that only
# they have (bench/kwok.py); an unapproved runtime, so the profile says `unsafe`.
SCALE_PROFILE = "bench-scale"
SCALE_RUNTIME_CLASS = "openblox-bench-kwok"
BENCH_PROFILE_NAMES = (SMALL_PROFILE, POOL_PROFILE, IDLE_PROFILE, NOPOD_PROFILE, SCALE_PROFILE)


def bench_profiles() -> dict[str, str]:
    """The profiles' texts, made when a run needs them: they name the sandbox image this
    checkout built, which a fresh clone has not built yet when its unit tests import this."""
    return {
        SMALL_PROFILE: profile_yaml("100m", "128Mi"),
        POOL_PROFILE: profile_yaml("500m", "96Mi", scratch="8Mi", cpu_request="25m"),
        IDLE_PROFILE: profile_yaml("10m", "64Mi", scratch="8Mi"),
        NOPOD_PROFILE: profile_yaml("1m", "64Mi", scratch="8Mi", runtime="openblox-bench-none"),
        SCALE_PROFILE: profile_yaml("10m", "64Mi", scratch="8Mi", runtime=SCALE_RUNTIME_CLASS),
    }


class Kube(Api):
    """Raw JSON access to the API server, shared by every thread of the run (one keep-alive
    connection per thread); a refusal raises the transport's typed error."""

    def __init__(
        self, kubeconfig: str = env.KUBECONFIG, *, request_timeout: float = REQUEST_TIMEOUT_SECONDS
    ) -> None:
        super().__init__(
            Session.discover(kubeconfig),
            user_agent="openblox-bench",
            request_timeout=request_timeout,
        )
        self.kubeconfig = kubeconfig

    def exists(self, path: str) -> bool:
        try:
            self.get(path)
        except NotFound:
            return False
        return True


def pods_path(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods"


def sandboxes_path(namespace: str) -> str:
    return f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"


# --------------------------------------------------------------------------- pools

POOLS_PATH = f"/api/v1/namespaces/{env.OPERATOR_NAMESPACE}/configmaps/openblox-pools"


def set_pool(kube: Kube, key: str, profile: str, namespace: str, size: int | None) -> None:
    """Pool `key` of `profile` in `namespace` at `size` pods; None removes the pool."""
    value = (
        None if size is None else f"profile: {profile}\nnamespaces: [{namespace}]\nsize: {size}\n"
    )
    kube.request(
        "PATCH",
        POOLS_PATH,
        {"data": {key: value}},
        content_type="application/merge-patch+json",
    )


def warm_pool_pods(kube: Kube, namespace: str, key: str) -> int:
    """Pods of pool `key` that can be handed out now: Ready, probed behind gVisor, staying."""
    pods = kube.get(pods_path(namespace), labelSelector=f"openblox.sh/pool={key}")["items"]
    return sum(
        1
        for p in pods
        if (p["metadata"].get("annotations") or {}).get("openblox.sh/boundary") == "gvisor"
        and not p["metadata"].get("deletionTimestamp")
        and any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in (p.get("status") or {}).get("conditions") or []
        )
    )


# --------------------------------------------------------------------------- namespaces


def make_namespace(kube: Kube, name: str, *, sandboxes: bool) -> str:
    labels = {BENCH_LABEL: "true"}
    if sandboxes:
        labels[LABEL_NAMESPACE_OPT_IN] = NAMESPACE_OPT_IN_VALUE
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}
    try:
        kube.request("POST", "/api/v1/namespaces", body)
    except ApiError as error:
        if not is_conflict(error):
            raise
    # The service account controller must make `default` before a pod can be admitted.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if kube.exists(f"/api/v1/namespaces/{name}/serviceaccounts/default"):
            break
        time.sleep(0.2)
    return name


def delete_namespace(kube: Kube, name: str, *, wait: float = 0) -> float | None:
    """Deletes a namespace; with wait > 0, returns how long it took to disappear."""
    started = time.monotonic()
    with contextlib.suppress(ApiError):
        patiently(kube.request, "DELETE", f"/api/v1/namespaces/{name}")
    if wait <= 0:
        return None
    while time.monotonic() - started < wait:
        try:
            if not kube.exists(f"/api/v1/namespaces/{name}"):
                return time.monotonic() - started
        except Exception:  # the API server restarting: keep waiting
            pass
        time.sleep(0.5)
    return None


def run_id() -> str:
    return uuid.uuid4().hex[:6]


# --------------------------------------------------------------------------- pod specs


def bare_pod(name: str, runtime_class: str | None, *, kind: str) -> dict[str, Any]:
    """The least a pod can be: the sandbox image sleeping, nothing hardened or limited."""
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 1,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "containers": [
            {
                "name": "sandbox",
                "image": env.SANDBOX_IMAGE,
                "imagePullPolicy": "Never",
                "command": ["/bin/sleep", "infinity"],
            }
        ],
    }
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {BENCH_LABEL: kind}},
        "spec": spec,
    }


def direct_pod(name: str, namespace: str, profile_name: str, profile_yaml: str) -> dict[str, Any]:
    """The pod the operator would make for a Sandbox, applied directly by the caller.

    Same builder, same profile; only the sandbox label (which admission reserves for the
    operator) and the owner reference (there is no Sandbox) are left out.
    """
    profile = parse_profile(profile_name, profile_yaml)
    sandbox = Sandbox(
        name=name,
        namespace=namespace,
        uid=str(uuid.uuid4()),
        generation=1,
        creation_timestamp=datetime.now(UTC),
        spec=SandboxSpec(profile=profile_name),
    )
    pod = build_pod(sandbox, profile, now=sandbox.creation_timestamp)
    metadata = pod["metadata"]
    metadata.pop("ownerReferences", None)
    metadata["labels"].pop(LABEL_SANDBOX, None)
    metadata["labels"][BENCH_LABEL] = "direct"
    return pod


# --------------------------------------------------------------------------- watches


def list_then_watch(
    kube: Kube,
    path: str,
    stop: threading.Event,
    seen: Callable[[str, Mapping[str, Any]], None],
    ready: threading.Event,
    *,
    params: Mapping[str, str] | None = None,
    reconnected: Callable[[], None] = lambda: None,
) -> None:
    """List `path`, then watch it from the list's version until `stop`: from a new list
    when that version is too old (410), from the last version seen after a cut stream,
    an ERROR event or an API hiccup. `seen(kind, body)` gets "EXISTING" for each listed
    object and each event's type after (BOOKMARKs left out); `ready` is set once listed."""
    version: str | None = None
    extra = dict(params or {})
    while not stop.is_set():
        try:
            if version is None:
                listing = kube.get(path, **extra)
                version = listing["metadata"]["resourceVersion"]
                for item in listing.get("items") or []:
                    seen("EXISTING", item)
                ready.set()
            events = kube.watch(
                path,
                resource_version=version,
                timeout_seconds=WATCH_SECONDS,
                bookmarks=True,
                **extra,
            )
            with contextlib.closing(events):
                for event in events:
                    if stop.is_set():
                        return
                    version = event["object"]["metadata"]["resourceVersion"]
                    if event["type"] != "BOOKMARK":
                        seen(event["type"], event["object"])
            reconnected()
        except Gone:
            version = None
            reconnected()
        except Exception:
            if stop.is_set():
                return
            reconnected()
            time.sleep(0.5)


class WatchRecorder:
    """Watches pods or Sandboxes in a namespace and stamps when each reaches each state.

    Stamps are time.monotonic() at receipt, so they compare with the caller's own clock
    readings; the API server's timestamps have one-second resolution, too coarse here.
    """

    def __init__(self, kube: Kube, namespace: str, kind: str) -> None:
        assert kind in ("pods", "sandboxes")
        self._kube = kube
        self._path = pods_path(namespace) if kind == "pods" else sandboxes_path(namespace)
        self._kind = kind
        self.marks: dict[str, dict[str, float]] = defaultdict(dict)
        self.detail: dict[str, str] = {}
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"watch-{kind}")
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError(f"could not start a watch on {self._path}")

    def close(self) -> None:
        """Stops recording; the watch thread leaves at its next event or when the API server
        ends the watch request, and closes its connection then."""
        self._stop.set()

    def __enter__(self) -> WatchRecorder:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _run(self) -> None:
        list_then_watch(self._kube, self._path, self._stop, self._observe, self._ready)

    def _stamp(self, name: str, mark: str, at: float) -> None:
        self.marks[name].setdefault(mark, at)

    def _observe(self, kind: str, body: Mapping[str, Any]) -> None:
        at = time.monotonic()
        name = body["metadata"]["name"]
        with self._cond:
            if kind == "EXISTING":
                self._stamp(name, "existing", at)
            elif kind == "ADDED":
                self._stamp(name, "added", at)
            elif kind == "DELETED":
                self._stamp(name, "deleted", at)
            status = body.get("status") or {}
            conditions = {c.get("type"): c for c in status.get("conditions") or []}
            if self._kind == "pods":
                if conditions.get("PodScheduled", {}).get("status") == "True":
                    self._stamp(name, "scheduled", at)
                elif conditions.get("PodScheduled", {}).get("reason"):
                    self.detail[name] = str(conditions["PodScheduled"].get("message"))
                if status.get("phase") == "Running":
                    self._stamp(name, "running", at)
                if status.get("phase") in ("Failed", "Succeeded"):
                    self._stamp(name, "failed", at)
                    self.detail[name] = str(status.get("reason") or status.get("message"))
                if conditions.get("Ready", {}).get("status") == "True":
                    self._stamp(name, "ready", at)
            else:
                ready = conditions.get("Ready", {})
                if ready.get("status") == "True":
                    self._stamp(name, "ready", at)
                elif ready.get("reason"):
                    self.detail[name] = f"{ready.get('reason')}: {ready.get('message')}"
                    self._stamp(name, "condition", at)
            self._cond.notify_all()

    def wait(self, name: str, mark: str, timeout: float, *, fail: str | None = None) -> float:
        """When name reached mark; raises TimeoutError, or RuntimeError if it hits `fail`."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                marks = self.marks.get(name, {})
                if mark in marks:
                    return marks[mark]
                if fail and fail in marks:
                    raise RuntimeError(f"{name}: {self.detail.get(name, fail)}")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(
                        f"{name} did not reach {mark} within {timeout:.0f}s "
                        f"({self.detail.get(name, 'no detail')})"
                    )
                self._cond.wait(min(remaining, 1.0))

    def count(self, mark: str, names: set[str] | None = None) -> int:
        with self._cond:
            return sum(
                1
                for name, marks in self.marks.items()
                if mark in marks and (names is None or name in names)
            )


# --------------------------------------------------------------------------- profiles


def ensure_bench_profiles(kube: Kube, timeout: float = 90) -> None:
    path = f"/api/v1/namespaces/{env.OPERATOR_NAMESPACE}/configmaps/{PROFILES_CONFIGMAP}"
    current = (kube.get(path).get("data")) or {}
    wanted = bench_profiles()
    if any(current.get(key) != value for key, value in wanted.items()):
        kube.request(
            "PATCH",
            path,
            {"data": wanted},
            content_type="application/merge-patch+json",
        )
    # Admission accepts a profile once the operator has published it there.
    admission = f"/api/v1/namespaces/{env.OPERATOR_NAMESPACE}/configmaps/{ADMISSION_CONFIGMAP}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(ApiError):
            published = kube.get(admission).get("data") or {}
            if all(key in published for key in wanted):
                return
        time.sleep(0.5)
    raise RuntimeError(
        f"the operator did not publish the benchmark profiles within {timeout:.0f}s "
        "(is it running?)"
    )


def remove_bench_profiles(kube: Kube, notes: list[str]) -> None:
    path = f"/api/v1/namespaces/{env.OPERATOR_NAMESPACE}/configmaps/{PROFILES_CONFIGMAP}"
    try:
        patiently(
            kube.request,
            "PATCH",
            path,
            {"data": dict.fromkeys(BENCH_PROFILE_NAMES)},
            content_type="application/merge-patch+json",
        )
    except (ApiError, RuntimeError) as error:
        notes.append(f"could not remove the benchmark profiles: {error}")


# --------------------------------------------------------------------------- the operator


class Operator:
    """The running operator's process on this node: memory, CPU, and its metrics."""

    def __init__(self, kube: Kube) -> None:
        self._kube = kube

    def replicas(self) -> list[dict[str, Any]]:
        """The operator's running pods, whichever holds the Lease."""
        pods = self._kube.get(
            pods_path(env.OPERATOR_NAMESPACE),
            labelSelector="app.kubernetes.io/name=openblox-operator",
        )["items"]
        return [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]

    def pod(self) -> dict[str, Any]:
        running = self.replicas()
        if not running:
            raise RuntimeError("no running operator pod in openblox-system")
        # The replica holding the Lease is the one that works (ADR 0009); the other
        # stands by.
        lease = self._kube.get(
            f"/apis/coordination.k8s.io/v1/namespaces/{env.OPERATOR_NAMESPACE}/leases/"
            "openblox-operator"
        )
        holder = str((lease.get("spec") or {}).get("holderIdentity") or "").rsplit("_", 1)[0]
        leading = [p for p in running if p["metadata"]["name"] == holder]
        return dict((leading or running)[0])

    def pids(self, pod: Mapping[str, Any] | None = None) -> list[int]:
        """The processes of one replica (by default the one holding the Lease)."""
        uid = (pod or self.pod())["metadata"]["uid"]
        containers = env.crictl_json("ps", "--label", f"io.kubernetes.pod.uid={uid}")
        table = procs.processes()
        roots = []
        for container in containers.get("containers", []):
            info = env.crictl_json("inspect", container["id"]).get("info", {})
            if info.get("pid"):
                roots.append(int(info["pid"]))
        if not roots:
            raise RuntimeError("could not find the operator's process")
        return procs.descendants(table, roots)

    def restarts(self) -> int:
        statuses = (self.pod().get("status") or {}).get("containerStatuses") or []
        return sum(int(s.get("restartCount", 0)) for s in statuses)

    def sample(self) -> dict[str, Any]:
        pids = self.pids()
        memory = procs.memory_of(pids)
        cgroup = procs.memory_cgroup(pids[0])
        return {
            "pids": pids,
            "rss": memory["rss"],
            "pss": memory["pss"],
            "cpu_seconds": procs.cpu_seconds(pids),
            "cgroup": procs.cgroup_memory(cgroup) if cgroup else {},
            "at": time.monotonic(),
        }

    def metrics(self) -> dict[str, float]:
        """The operator's own Prometheus metrics, read from its pod IP (empty if unreachable)."""
        ip = (self.pod().get("status") or {}).get("podIP")
        if not ip:
            return {}
        connection = http.client.HTTPConnection(ip, 9090, timeout=5)
        try:
            connection.request("GET", "/metrics")
            text = connection.getresponse().read().decode()
        except (http.client.HTTPException, OSError):
            return {}
        finally:
            connection.close()
        return parse_prometheus(text)


def parse_prometheus(text: str) -> dict[str, float]:
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        with contextlib.suppress(ValueError):
            values[key] = float(value)
    return values


# --------------------------------------------------------------------------- API request counting

# One FlowSchema per resource, matching only the operator's ServiceAccount and sending it
# to the priority level it gets anyway (workload-low, like every service account): the API
# server then counts the operator's requests per schema in
# apiserver_flowcontrol_dispatched_requests_total. Long-running requests other than
# watches (pods/exec) bypass flow control and are not counted there.
FLOW_RESOURCES = (
    ("sandboxes", GROUP, ["sandboxes"]),
    ("sandboxes-status", GROUP, ["sandboxes/status"]),
    ("pods", "", ["pods", "pods/status"]),
    ("events", "*", ["events"]),
    ("namespaces", "", ["namespaces"]),
    ("runtimeclasses", "node.k8s.io", ["runtimeclasses"]),
    ("networkpolicies", "networking.k8s.io", ["networkpolicies"]),
    ("leases-peering", "*", ["leases", "clusterkopfpeerings", "kopfpeerings"]),
    ("configmaps", "", ["configmaps"]),
)
FLOW_PREFIX = "openblox-bench-op-"


class FlowCounter:
    def __init__(self, kube: Kube) -> None:
        self._kube = kube
        self.names: list[str] = []

    def _schema(self, name: str, precedence: int, rule: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
            "kind": "FlowSchema",
            "metadata": {"name": name, "labels": {BENCH_LABEL: "true"}},
            "spec": {
                "priorityLevelConfiguration": {"name": "workload-low"},
                "matchingPrecedence": precedence,
                "distinguisherMethod": {"type": "ByUser"},
                "rules": [
                    {
                        "subjects": [
                            {
                                "kind": "ServiceAccount",
                                "serviceAccount": {
                                    "name": env.OPERATOR_SERVICE_ACCOUNT,
                                    "namespace": env.OPERATOR_NAMESPACE,
                                },
                            }
                        ],
                        **rule,
                    }
                ],
            },
        }

    def install(self, namespace: str | None = None) -> None:
        """Per-resource schemas for the operator; with a namespace, a first set that
        matches only requests in that namespace, so those are counted exactly."""
        path = "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas"
        schemas = []
        if namespace:
            for index, (label, group, resources) in enumerate(FLOW_RESOURCES):
                rule: dict[str, Any] = {  # a FlowSchema's spec.rules entry, as _schema takes
                    "resourceRules": [
                        {
                            "verbs": ["*"],
                            "apiGroups": [group],
                            "resources": resources,
                            "namespaces": [namespace],
                        }
                    ]
                }
                schemas.append(self._schema(f"{FLOW_PREFIX}ns-{label}", 1000 + index, rule))
        for index, (label, group, resources) in enumerate(FLOW_RESOURCES):
            rule = {
                "resourceRules": [
                    {
                        "verbs": ["*"],
                        "apiGroups": [group],
                        "resources": resources,
                        "namespaces": ["*"],
                        "clusterScope": True,
                    }
                ]
            }
            schemas.append(self._schema(FLOW_PREFIX + label, 1050 + index, rule))
        other = {
            "resourceRules": [
                {
                    "verbs": ["*"],
                    "apiGroups": ["*"],
                    "resources": ["*"],
                    "namespaces": ["*"],
                    "clusterScope": True,
                }
            ],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
        }
        schemas.append(self._schema(FLOW_PREFIX + "other", 1099, other))
        for schema in schemas:
            try:
                self._kube.request("POST", path, schema)
            except ApiError as error:
                if not is_conflict(error):
                    raise
            self.names.append(schema["metadata"]["name"])

    def remove(self) -> None:
        for name in self.names:
            with contextlib.suppress(ApiError, RuntimeError):
                patiently(
                    self._kube.request,
                    "DELETE",
                    f"/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas/{name}",
                )
        self.names.clear()

    def read(self) -> dict[str, float]:
        """Requests dispatched so far per schema label (`ns-pods`, `pods`, ..., `other`)."""
        counts: dict[str, float] = {}
        marker = f'flow_schema="{FLOW_PREFIX}'
        for key, value in parse_prometheus(self._kube.text("/metrics")).items():
            if key.startswith("apiserver_flowcontrol_dispatched_requests_total{") and marker in key:
                label = key.split(marker, 1)[1].split('"', 1)[0]
                counts[label] = counts.get(label, 0.0) + value
        for name in self.names:
            counts.setdefault(name.removeprefix(FLOW_PREFIX), 0.0)
        return counts


# --------------------------------------------------------------------------- pods on the node


def node_pods(namespace: str) -> dict[str, dict[str, Any]]:
    """Pod name -> its pod sandbox ID and container IDs, as containerd knows them."""
    sandboxes = env.crictl_json("pods", "--namespace", namespace, "--state", "ready")
    containers = env.crictl_json("ps", "--state", "running")
    found: dict[str, dict[str, Any]] = {}
    by_id: dict[str, dict[str, Any]] = {}
    for item in sandboxes.get("items", []):
        entry = {"sandbox_id": item["id"], "container_ids": [], "uid": item["metadata"]["uid"]}
        found[item["metadata"]["name"]] = entry
        by_id[item["id"]] = entry
    for container in containers.get("containers", []):
        owner = by_id.get(container["podSandboxId"])
        if owner is not None:
            owner["container_ids"].append(container["id"])
    return found


def pod_memory(pods: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Host memory of each pod: its shims and everything under them, and its pod cgroup.

    `pss` divides the pages of the sandbox software's files among these pods only
    (bench/page_share.py); `pss_kernel` is the kernel's PSS, which divides them among
    every process on the host that maps them."""
    table = procs.processes()
    trees = {
        name: procs.descendants(
            table, procs.shims_for(table, [ids["sandbox_id"], *ids["container_ids"]])
        )
        for name, ids in pods.items()
    }
    extra = page_share.extra_pss(pid for pids in trees.values() for pid in pids)
    per_pod = {}
    for name, ids in pods.items():
        pids = trees[name]
        memory: dict[str, Any] = dict(procs.memory_of(pids, extra))  # then more below
        memory["pss_kernel"] = procs.memory_of(pids)["pss"]
        memory["extra"] = {pid: extra.get(pid, 0.0) for pid in pids}
        cgroup = None
        for pid in pids:
            path = procs.memory_cgroup(pid)
            if path is not None and f"pod{ids['uid']}" in str(path):
                cgroup = path
                while cgroup.name != f"pod{ids['uid']}" and cgroup != cgroup.parent:
                    cgroup = cgroup.parent
                break
        memory["cgroup"] = procs.cgroup_memory(cgroup) if cgroup else {}
        memory["pids"] = pids
        per_pod[name] = memory
    return per_pod


def use_bench_profiles(ctx: Any) -> None:
    """Makes sure the benchmark profiles are there; the run removes them at its end."""
    ensure_bench_profiles(ctx.kube)
    if not ctx.shared.get("profiles"):
        ctx.shared["profiles"] = True
        ctx.cleanup(remove_bench_profiles, ctx.kube, ctx.run.notes)


def patiently(function: Any, *args: Any, seconds: float = 120, **kwargs: Any) -> Any:
    """Calls function, retrying while the API server does not answer (a restart)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return function(*args, **kwargs)
        except (http.client.HTTPException, OSError) as error:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the API server did not answer for {seconds:.0f} s") from error
            time.sleep(2)
        except ApiError as error:
            if error.status not in RETRIED_STATUSES or time.monotonic() > deadline:
                raise
            time.sleep(2)


def cluster_ready(kube: Kube) -> str | None:
    """None when the API server and the operator answer; else what is wrong."""
    try:
        kube.text("/readyz")
    except Exception as error:
        return f"the API server does not answer ({type(error).__name__})"
    try:
        Operator(kube).pod()
    except Exception as error:
        return f"the operator is not running: {error}"
    return None


def clean_leftovers(kube: Kube, notes: list[str]) -> None:
    """Removes what an interrupted run may have left: namespaces, FlowSchemas, profiles."""
    for item in kube.get("/api/v1/namespaces", labelSelector=f"{BENCH_LABEL}=true")["items"]:
        delete_namespace(kube, item["metadata"]["name"])
        notes.append(f"deleted leftover namespace {item['metadata']['name']}")
    schemas = kube.get("/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas")["items"]
    for item in schemas:
        name = item["metadata"]["name"]
        if name.startswith(FLOW_PREFIX):
            with contextlib.suppress(ApiError):
                kube.request("DELETE", f"/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas/{name}")
    remove_bench_profiles(kube, notes)


def node_capacity(kube: Kube) -> dict[str, float]:
    """What the node can still schedule: allocatable minus every live pod's requests.

    In millicores and MiB, counting RuntimeClass overhead as the scheduler does.
    """
    from openblox.models import parse_quantity

    nodes = kube.get("/api/v1/nodes")["items"]
    cpu = sum(float(parse_quantity(n["status"]["allocatable"]["cpu"])) for n in nodes) * 1000
    memory = sum(float(parse_quantity(n["status"]["allocatable"]["memory"])) for n in nodes)
    pods_max = sum(int(n["status"]["allocatable"]["pods"]) for n in nodes)
    pods = kube.get("/api/v1/pods", fieldSelector="status.phase!=Succeeded,status.phase!=Failed")[
        "items"
    ]
    used_cpu = used_memory = 0.0
    for pod in pods:
        spec = pod["spec"]
        if not spec.get("nodeName"):
            continue  # pending: holds nothing on the node yet
        requests = [c.get("resources", {}).get("requests", {}) for c in spec["containers"]]
        requests.append(spec.get("overhead") or {})
        for request in requests:
            used_cpu += float(parse_quantity(str(request.get("cpu", "0")))) * 1000
            used_memory += float(parse_quantity(str(request.get("memory", "0"))))
    return {
        "cpu_allocatable_m": cpu,
        "cpu_free_m": cpu - used_cpu,
        "memory_allocatable_mib": memory / 2**20,
        "memory_free_mib": (memory - used_memory) / 2**20,
        "pods_max": pods_max,
        "pods": sum(1 for pod in pods if pod["spec"].get("nodeName")),
    }
