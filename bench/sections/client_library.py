"""Which Kubernetes client library the openblox client should use (ADR 0006).

The official `kubernetes` package against lightkube (and kr8s, when installed: both are
in the `bench` extra), each doing what the openblox client does, in the same run:

- import time and RSS: a fresh interpreter per sample imports the library and builds a
  client from the kubeconfig; it reports the time the imports took and its RSS after
  the imports and after the client (`python -c pass` is the baseline);
- p50/p95 of a `get` and a `list` of Sandbox custom objects;
- a watch that waits for a change: open a watch from a known resourceVersion and wait
  for the event carrying an annotation the bench patched in (the patch is sent by the
  same helper for every library, so its cost is common to all);
- pods/exec of `true` in a running code-exec sandbox: kubernetes' `stream()`,
  lightkube's `Client.exec`, kr8s' `Pod.exec`, and openblox's own v5 websocket
  (`openblox.transport.sync_exec`, without the supervisor); `sandbox.exec` (with the
  supervisor) is
  shown for reference. Each exec path also runs `printf 42` repeatedly and counts
  answers with the wrong output or exit code.

Ratios are against the `kubernetes` package's figure for the same operation.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import importlib.metadata
import importlib.util
import json
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Generator, Iterator
from typing import Any, Protocol

from bench import env
from bench.cluster_side import delete_namespace, make_namespace
from bench.results import Section
from openblox.client import Client
from openblox.transport import STDOUT

TITLES = {"client-library": "Kubernetes client library: kubernetes vs lightkube (vs kr8s)"}

GROUP, VERSION, PLURAL, KIND = "openblox.sh", "v1alpha1", "sandboxes", "Sandbox"
CONTAINER = "sandbox"
ANNOTATION = "openblox.sh/bench-client-library"
LABELS = {
    "kubernetes": "kubernetes (official)",
    "lightkube": "lightkube",
    "kr8s": "kr8s",
    "openblox": "openblox.Client (own transport: http.client + websocket)",
}

# Each snippet runs in a fresh interpreter: imports, then builds a client (no request).
_PROBE = """
import json, sys, time
def rss():
    for line in open('/proc/self/status'):
        if line.startswith('VmRSS:'):
            return int(line.split()[1])
K = sys.argv[1]
rss0 = rss()
t0 = time.perf_counter()
{imports}
t1 = time.perf_counter()
rss1 = rss()
{client}
rss2 = rss()
print(json.dumps({{"import_ms": (t1 - t0) * 1000, "rss_start": rss0, "rss_import": rss1,
                  "rss_client": rss2}}))
"""
SNIPPETS: dict[str, tuple[str, str]] = {
    "python": ("pass", "pass"),
    "kubernetes": (
        "from kubernetes import client, config, watch\nfrom kubernetes.stream import stream",
        "cfg = client.Configuration()\n"
        "config.load_kube_config(config_file=K, client_configuration=cfg)\n"
        "api = client.ApiClient(cfg)\n"
        "custom = client.CustomObjectsApi(api); core = client.CoreV1Api(api)",
    ),
    "lightkube": (
        "from lightkube import Client, KubeConfig\n"
        "from lightkube.generic_resource import create_namespaced_resource",
        "c = Client(KubeConfig.from_file(K))\n"
        "S = create_namespaced_resource('openblox.sh', 'v1alpha1', 'Sandbox', 'sandboxes')",
    ),
    "kr8s": (
        "import kr8s\nfrom kr8s.objects import Pod, new_class",
        "api = kr8s.api(kubeconfig=K)\n"
        "S = new_class(kind='Sandbox', version='openblox.sh/v1alpha1', namespaced=True, "
        "plural='sandboxes', asyncio=False)",
    ),
    "openblox": ("from openblox import Client", "c = Client('default', kubeconfig=K)"),
}


def available() -> list[str]:
    """The libraries this venv has: kubernetes always; the others from the bench extra."""
    return ["kubernetes"] + [
        name for name in ("lightkube", "kr8s") if importlib.util.find_spec(name) is not None
    ]


def _probe(name: str) -> dict[str, float]:
    imports, client = SNIPPETS[name]
    completed = subprocess.run(
        [sys.executable, "-c", _PROBE.format(imports=imports, client=client), env.KUBECONFIG],
        capture_output=True,
        timeout=120,
        check=True,
    )
    data: dict[str, float] = json.loads(completed.stdout.decode().strip().splitlines()[-1])
    return data


# --------------------------------------------------------------------------- the libraries


class Official:
    """The official package, doing what the openblox client does."""

    name = "kubernetes"

    def __init__(self) -> None:
        from kubernetes import client, config

        cfg = client.Configuration()
        config.load_kube_config(config_file=env.KUBECONFIG, client_configuration=cfg)
        self.custom = client.CustomObjectsApi(client.ApiClient(cfg))
        # stream() swaps call_api on the ApiClient it is given: keep it a client of its own.
        self.core_exec = client.CoreV1Api(client.ApiClient(cfg))

    def get(self, ns: str, name: str) -> str:
        body = self.custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)
        return str(body["metadata"]["name"])

    def list(self, ns: str) -> int:
        return len(self.custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)["items"])

    def watch(self, ns: str, name: str, rv: str, token: str, timeout: float) -> bool:
        from kubernetes import watch

        w = watch.Watch()
        for event in w.stream(
            self.custom.list_namespaced_custom_object,
            GROUP,
            VERSION,
            ns,
            PLURAL,
            field_selector=f"metadata.name={name}",
            resource_version=rv,
            timeout_seconds=int(timeout),
        ):
            annotations = event["object"]["metadata"].get("annotations") or {}
            if annotations.get(ANNOTATION) == token:
                w.stop()
                return True
        return False

    def exec(self, ns: str, pod: str, argv: builtins.list[str]) -> tuple[int | None, bytes]:
        from kubernetes.stream import stream

        response = stream(
            self.core_exec.connect_get_namespaced_pod_exec,
            pod,
            ns,
            container=CONTAINER,
            command=argv,
            stdout=True,
            stderr=True,
            stdin=False,
            tty=False,
            binary=True,
            _preload_content=False,
        )
        try:
            response.run_forever(timeout=30)
            out = response.read_channel(STDOUT)
            return response.returncode, bytes(out or b"")
        finally:
            response.close()


class Light:
    name = "lightkube"

    def __init__(self) -> None:
        from lightkube import Client as LightClient
        from lightkube import KubeConfig
        from lightkube.generic_resource import create_namespaced_resource

        self.client = LightClient(KubeConfig.from_file(env.KUBECONFIG))
        self.resource = create_namespaced_resource(GROUP, VERSION, KIND, PLURAL)

    def get(self, ns: str, name: str) -> str:
        metadata = self.client.get(self.resource, name, namespace=ns).metadata
        if metadata is None:  # typed optional; the API server always sends it
            raise RuntimeError(f"lightkube: {ns}/{name} came back without metadata")
        return str(metadata.name)

    def list(self, ns: str) -> int:
        return len(list(self.client.list(self.resource, namespace=ns)))

    def watch(self, ns: str, name: str, rv: str, token: str, timeout: float) -> bool:
        # lightkube's watch takes a resource version and has no server-side timeout: the
        # generator is closed as soon as the change arrives.
        events = self.client.watch(
            self.resource, namespace=ns, fields={"metadata.name": name}, resource_version=rv
        )
        try:
            for _op, obj in events:
                annotations = (obj.metadata.annotations if obj.metadata else None) or {}
                if annotations.get(ANNOTATION) == token:
                    return True
        finally:
            if isinstance(events, Generator):  # typed an Iterator; it is a generator
                events.close()
        return False

    def exec(self, ns: str, pod: str, argv: builtins.list[str]) -> tuple[int | None, bytes]:
        result = self.client.exec(
            pod,
            namespace=ns,
            container=CONTAINER,
            command=argv,
            stdout=True,
            stderr=True,
            decode=None,
            timeout=30,
        )
        out = result.stdout or b""  # bytes with decode=None; typed str | bytes
        return result.exit_code, out.encode() if isinstance(out, str) else bytes(out)


class Kr8s:
    name = "kr8s"

    def __init__(self) -> None:
        import kr8s
        from kr8s.objects import Pod, new_class

        self.api = kr8s.api(kubeconfig=env.KUBECONFIG)
        self.pod_class = Pod
        self.resource = new_class(
            kind=KIND, version=f"{GROUP}/{VERSION}", namespaced=True, plural=PLURAL, asyncio=False
        )

    def get(self, ns: str, name: str) -> str:
        return str(self.resource.get(name, namespace=ns, api=self.api).name)

    def list(self, ns: str) -> int:
        return len(list(self.api.get(self.resource, namespace=ns)))

    def watch(self, ns: str, name: str, rv: str, token: str, timeout: float) -> bool:
        events = self.api.watch(
            f"{PLURAL}.{GROUP}", namespace=ns, field_selector=f"metadata.name={name}", since=rv
        )
        try:
            for _op, obj in events:
                annotations: dict[str, str] = obj.annotations or {}
                if annotations.get(ANNOTATION) == token:
                    return True
        finally:
            events.close()
        return False

    def exec(self, ns: str, pod: str, argv: builtins.list[str]) -> tuple[int | None, bytes]:
        target = self.pod_class.get(pod, namespace=ns, api=self.api)
        done = target.exec(argv, container=CONTAINER, check=False)
        return int(done.returncode), bytes(done.stdout or b"")


class Library(Protocol):
    """What each client library is measured doing, the same way for all of them."""

    name: str

    def get(self, ns: str, name: str) -> str: ...
    def list(self, ns: str) -> int: ...
    def watch(self, ns: str, name: str, rv: str, token: str, timeout: float) -> bool: ...
    def exec(self, ns: str, pod: str, argv: builtins.list[str]) -> tuple[int | None, bytes]: ...


LIBRARIES: dict[str, Callable[[], Library]] = {
    "kubernetes": Official,
    "lightkube": Light,
    "kr8s": Kr8s,
}


# --------------------------------------------------------------------------- measuring


def _timed(call: Callable[[], Any]) -> float:
    started = time.perf_counter()
    call()
    return (time.perf_counter() - started) * 1000


def _latency_figure(
    section: Section, op: str, name: str, samples: list[float], *, title: str, label: str
) -> None:
    section.figure(
        f"client_library.{op}.{name}",
        f"{title}: {label}",
        "ms",
        samples,
        baseline=f"client_library.{op}.kubernetes" if name != "kubernetes" else None,
        group=f"client-library-{op}",
        group_title=title,
        label=label,
    )


def _footprint(ctx: Any, section: Section, names: list[str]) -> None:
    rounds = ctx.n(10, 2)
    probes = ["python", *names, "openblox"]
    for name in probes:
        _probe(name)  # warm the page cache and the bytecode caches
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in probes}
    for _ in range(rounds):
        for name in probes:
            samples[name].append(_probe(name))
    ctx.log("client_library: import time and RSS done")
    bare = samples["python"]
    bare_rss = sorted(s["rss_client"] for s in bare)[len(bare) // 2] / 1024
    section.figure(
        "client_library.rss.python",
        "RSS of a bare interpreter (python -c pass)",
        "MiB",
        [s["rss_client"] / 1024 for s in bare],
        group="client-library-rss",
        group_title="RSS after import + client",
        label="bare python",
    )
    for name in [*names, "openblox"]:
        label = LABELS[name]
        baseline = name != "kubernetes"
        section.figure(
            f"client_library.import.{name}",
            f"import time (fresh interpreter): {label}",
            "ms",
            [s["import_ms"] for s in samples[name]],
            baseline="client_library.import.kubernetes" if baseline else None,
            group="client-library-import",
            group_title="import time (fresh interpreter)",
            label=label,
        )
        section.figure(
            f"client_library.rss.{name}",
            f"RSS after import + client: {label}",
            "MiB",
            [s["rss_client"] / 1024 for s in samples[name]],
            baseline="client_library.rss.kubernetes" if baseline else None,
            floor="client_library.rss.python",
            group="client-library-rss",
            group_title="RSS after import + client",
            label=label,
        )
        section.figure(
            f"client_library.rss_added.{name}",
            f"RSS added over a bare interpreter: {label}",
            "MiB",
            [s["rss_client"] / 1024 - bare_rss for s in samples[name]],
            baseline="client_library.rss_added.kubernetes" if baseline else None,
        )


@contextlib.contextmanager
def _sandbox(ctx: Any) -> Iterator[tuple[str, Any]]:
    ns = make_namespace(ctx.kube, f"obx-bench-client-lib-{ctx.run_id}", sandboxes=True)
    ctx.cleanup(delete_namespace, ctx.kube, ns)
    client = Client(ns, kubeconfig=env.KUBECONFIG)
    sandbox = client.create("code-exec", name="client-lib", timeout=300)
    try:
        yield ns, sandbox
    finally:
        sandbox.delete()


def _patch_annotation(ctx: Any, ns: str, name: str, value: str) -> None:
    ctx.kube.request(
        "PATCH",
        f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/{PLURAL}/{name}",
        {"metadata": {"annotations": {ANNOTATION: value}}},
        content_type="application/merge-patch+json",
    )


def _watch_once(ctx: Any, library: Any, ns: str, name: str) -> float:
    """Open a watch from the current resourceVersion, patch, wait for the change."""
    body = ctx.kube.get(f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/{PLURAL}/{name}")
    rv = body["metadata"]["resourceVersion"]
    token = secrets.token_hex(6)
    seen: list[bool] = []
    errors: list[BaseException] = []

    def wait() -> None:
        try:
            seen.append(library.watch(ns, name, rv, token, 30))
        except BaseException as error:  # reported in the caller's thread
            errors.append(error)

    started = time.perf_counter()
    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    _patch_annotation(ctx, ns, name, token)
    thread.join(40)
    elapsed = (time.perf_counter() - started) * 1000
    if errors:
        raise errors[0]
    if thread.is_alive() or seen != [True]:
        raise RuntimeError(f"{library.name}: the watch did not see the change")
    return elapsed


def _api_calls(
    ctx: Any, section: Section, libraries: dict[str, Library], ns: str, name: str
) -> None:
    n = ctx.n(100, 5)
    ops: dict[str, Callable[[Library], object]] = {
        "get": lambda lib: lib.get(ns, name),
        "list": lambda lib: lib.list(ns),
    }
    for lib in libraries.values():  # warm each connection pool
        if lib.get(ns, name) != name or lib.list(ns) != 1:
            raise RuntimeError(f"{lib.name}: unexpected get/list answer")
    samples: dict[tuple[str, str], list[float]] = {(op, lib): [] for op in ops for lib in libraries}
    for _ in range(n):
        for op, call in ops.items():
            for lib_name, lib in libraries.items():
                samples[(op, lib_name)].append(_timed(functools.partial(call, lib)))
    titles = {"get": "get a Sandbox", "list": "list Sandboxes (namespace of 1)"}
    for (op, lib_name), values in samples.items():
        _latency_figure(section, op, lib_name, values, title=titles[op], label=LABELS[lib_name])
    ctx.log("client_library: get and list done")

    rounds = ctx.n(20, 3)
    watch_samples: dict[str, list[float]] = {lib: [] for lib in libraries}
    for _ in range(rounds):
        for lib_name, lib in libraries.items():
            watch_samples[lib_name].append(_watch_once(ctx, lib, ns, name))
    for lib_name, values in watch_samples.items():
        _latency_figure(
            section,
            "watch",
            lib_name,
            values,
            title="open a watch, patch, receive the change",
            label=LABELS[lib_name],
        )
    ctx.log("client_library: watch done")


def _exec_paths(
    libraries: dict[str, Library], client: Client, ns: str, sandbox: Any
) -> dict[str, tuple[str, Callable[[list[str]], tuple[int | None, bytes]]]]:
    pod = sandbox.pod

    def own(argv: list[str]) -> tuple[int | None, bytes]:
        socket = client._io.open_exec(ns, pod, argv, stdin=False, timeout=30)
        output = socket.read_to_end(time.monotonic() + 30)
        return output.exit_code, bytes(output.stdout)

    def supervised(argv: list[str]) -> tuple[int | None, bytes]:
        result = sandbox.exec(argv)
        return result.exit_code, result.stdout

    paths: dict[str, tuple[str, Callable[[list[str]], tuple[int | None, bytes]]]] = {
        name: (
            {
                "kubernetes": "kubernetes stream() (websocket-client)",
                "lightkube": "lightkube Client.exec (httpx websocket)",
                "kr8s": "kr8s Pod.get + Pod.exec (httpx-ws)",
            }[name],
            functools.partial(lib.exec, ns, pod),
        )
        for name, lib in libraries.items()
    }
    paths["openblox"] = ("openblox transport v5 websocket (no supervisor)", own)
    paths["openblox_supervised"] = ("openblox sandbox.exec (with the supervisor)", supervised)
    return paths


def _exec(
    ctx: Any,
    section: Section,
    paths: dict[str, tuple[str, Callable[[list[str]], tuple[int | None, bytes]]]],
) -> None:
    for _label, call in paths.values():  # warm each path
        call(["true"])
    n = ctx.n(50, 5)
    samples: dict[str, list[float]] = {name: [] for name in paths}
    failures: dict[str, int] = dict.fromkeys(paths, 0)
    for _ in range(n):
        for name, (_, call) in paths.items():
            started = time.perf_counter()
            code, _out = call(["true"])
            samples[name].append((time.perf_counter() - started) * 1000)
            if code != 0:
                failures[name] += 1
    ctx.log("client_library: exec `true` done")
    checks = ctx.n(50, 5)
    wrong: dict[str, int] = dict.fromkeys(paths, 0)
    for _ in range(checks):
        for name, (_, call) in paths.items():
            try:
                code, out = call(["printf", "42"])
            except Exception:
                wrong[name] += 1
                continue
            if code != 0 or out != b"42":
                wrong[name] += 1
    for name, (label, _) in paths.items():
        section.figure(
            f"client_library.exec.{name}",
            f"exec `true`: {label}",
            "ms",
            samples[name],
            baseline="client_library.exec.kubernetes" if name != "kubernetes" else None,
            group="client-library-exec",
            group_title="pods/exec of `true` in a code-exec sandbox",
            label=label,
            wrong_exit=failures[name],
            wrong_output=wrong[name],
            checks=checks,
        )
    section.table(
        f"exec `printf 42`, {checks} runs per path: answers with the wrong output or exit code",
        ["path", "wrong", "of"],
        [[label, wrong[name], checks] for name, (label, _) in paths.items()],
    )


def run(ctx: Any, section: Section) -> None:
    names = available()
    missing = sorted(set(LIBRARIES) - set(names))
    if missing:
        section.notes.append(
            f"not installed, not measured: {', '.join(missing)} (pip install -e '.[bench]')"
        )
    _footprint(ctx, section, names)
    libraries = {name: LIBRARIES[name]() for name in names}
    with _sandbox(ctx) as (ns, sandbox):
        client = Client(ns, kubeconfig=env.KUBECONFIG)
        _api_calls(ctx, section, libraries, ns, sandbox.name)
        _exec(ctx, section, _exec_paths(libraries, client, ns, sandbox))
    versions = [f"{name} {importlib.metadata.version(name)}" for name in names]
    section.notes.append(
        "Versions: "
        + ", ".join(versions)
        + f"; Python {sys.version.split()[0]}. Every library is used synchronously, one "
        "call at a time, each with its own warm connection pool; operations are "
        "interleaved round robin so drift in the node's load falls on all alike. Import "
        "time is the imports alone, measured inside a fresh interpreter; RSS is the "
        "interpreter's after the imports and building a client (no request made). The "
        "watch figure includes opening the watch and the common merge-patch that makes "
        "the change. The openblox rows are what the client does today: its own transport "
        "(openblox.transport: http.client for API calls, a v5 websocket for exec), without "
        "the kubernetes package. With PYTHONDONTWRITEBYTECODE "
        "set and no .pyc in an editable checkout, the openblox import also compiles "
        "openblox's own modules."
    )
