"""Exec latency of `true` and `python3 -c 'print(6*7)'`, and exec throughput with N callers.

The same sandbox pod is reached four ways: the openblox client (pods/exec over a
websocket, through the in-sandbox supervisor that enforces timeout and output cap),
`kubectl exec` (pods/exec, no supervisor), `crictl exec` on the node (containerd's CRI
streaming server, no API server: the floor) and, for the alternative, `docker exec` into
a `docker run --runtime runsc` container with openblox's flags.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from bench import docker as docker_mod
from bench import env
from bench.cluster_side import (
    WatchRecorder,
    bare_pod,
    delete_namespace,
    make_namespace,
    pods_path,
)
from bench.results import Section
from openblox.client import Client

TITLES = {"exec": "Exec: client vs kubectl exec vs crictl exec vs docker exec; throughput"}
COMMANDS = {"true": ["true"], "python": ["python3", "-c", "print(6*7)"]}
EXPECTED = {"true": b"", "python": b"42\n"}


def container_id(namespace: str, pod: str) -> str:
    listing = env.crictl_json(
        "ps",
        "--label",
        f"io.kubernetes.pod.namespace={namespace}",
        "--label",
        f"io.kubernetes.pod.name={pod}",
        "--state",
        "running",
    )
    containers = listing.get("containers") or []
    if not containers:
        raise RuntimeError(f"no running container for {namespace}/{pod}")
    return str(containers[0]["id"])


def _subprocess(argv_prefix: list[str]) -> Callable[[list[str]], bytes]:
    def call(argv: list[str]) -> bytes:
        return env.run([*argv_prefix, *argv], timeout=60).stdout

    return call


def methods(ctx: Any, section: Section) -> dict[str, tuple[str, Callable[[list[str]], bytes]]]:
    kube = ctx.kube
    rid = ctx.run_id
    ns_sbx = make_namespace(kube, f"obx-bench-exec-sbx-{rid}", sandboxes=True)
    ctx.cleanup(delete_namespace, kube, ns_sbx)
    ns_pods = make_namespace(kube, f"obx-bench-exec-pods-{rid}", sandboxes=False)
    ctx.cleanup(delete_namespace, kube, ns_pods)
    client = Client(ns_sbx, kubeconfig=env.KUBECONFIG)
    # The shipped default profile (cpu 500m); it may wait for other sessions' pods to
    # free CPU requests on this small node.
    sandbox = client.create("code-exec", name="exec", timeout=300)
    ctx.cleanup(sandbox.delete)
    with WatchRecorder(kube, ns_pods, "pods") as watch:
        for name, runtime in (("runc", None), ("gvisor", "gvisor")):
            kube.request("POST", pods_path(ns_pods), bare_pod(name, runtime, kind=name))
        for name in ("runc", "gvisor"):
            watch.wait(name, "ready", 180, fail="failed")
    sandbox_cid = container_id(ns_sbx, sandbox.pod)
    runc_cid = container_id(ns_pods, "runc")

    def client_call(argv: list[str]) -> bytes:
        result = sandbox.exec(argv)
        if result.exit_code != 0:
            raise RuntimeError(f"exit {result.exit_code}: {result.stderr[-200:]!r}")
        return result.stdout

    def client_raw(argv: list[str]) -> bytes:
        socket = client._io.open_exec(ns_sbx, sandbox.pod, argv, stdin=False, timeout=30)
        return bytes(socket.read_to_end(time.monotonic() + 30).stdout)

    found: dict[str, tuple[str, Callable[[list[str]], bytes]]] = {
        "client": ("openblox client sandbox.exec (gVisor)", client_call),
        "client_raw": ("client's websocket without the supervisor (gVisor)", client_raw),
        "kubectl": (
            "kubectl exec (gVisor sandbox pod)",
            _subprocess(env.kubectl_argv("exec", "-n", ns_sbx, sandbox.pod, "-c", "sandbox", "--")),
        ),
        "crictl": (
            "crictl exec on the node (gVisor sandbox pod)",
            _subprocess(env.crictl_argv("exec", sandbox_cid)),
        ),
        "kubectl_runc": (
            "kubectl exec (bare runc pod)",
            _subprocess(env.kubectl_argv("exec", "-n", ns_pods, "runc", "--")),
        ),
        "kubectl_gvisor_bare": (
            "kubectl exec (bare gVisor pod)",
            _subprocess(env.kubectl_argv("exec", "-n", ns_pods, "gvisor", "--")),
        ),
        "crictl_runc": (
            "crictl exec on the node (bare runc pod)",
            _subprocess(env.crictl_argv("exec", runc_cid)),
        ),
    }
    docker = docker_mod.shared(ctx)
    if docker.problem:
        section.notes.append(f"docker exec not measured: {docker.problem}")
    else:
        name = f"obx-bench-exec-{rid}"
        docker.run(*docker_mod.idle_container(name, "exec", memory="512m", cpus="0.5"))
        ctx.cleanup(docker.run, "rm", "-f", name)
        found["docker"] = (
            "docker exec (runsc, openblox flags)",
            _subprocess(docker.argv("exec", name)),
        )
    return found


def run(ctx: Any, section: Section) -> None:
    found = methods(ctx, section)
    n = ctx.n(30, 3)
    samples: dict[tuple[str, str], list[float]] = {(m, c): [] for m in found for c in COMMANDS}
    # Warm each path once (first exec into a pod sets up its streaming connection).
    for method, (_, call) in found.items():
        for command, argv in COMMANDS.items():
            output = call(argv)
            if output != EXPECTED[command]:
                raise RuntimeError(f"{method} {command}: unexpected output {output!r}")
    for index in range(n):
        for command, argv in COMMANDS.items():
            for method, (_, call) in found.items():
                started = time.monotonic()
                call(argv)
                samples[(method, command)].append((time.monotonic() - started) * 1000)
        if (index + 1) % 10 == 0 or index == 0:
            ctx.log(f"exec: {index + 1}/{n}")

    baselines = {
        "client": "kubectl",
        "client_raw": "kubectl",
        "kubectl": "crictl",
        "crictl": "crictl_runc",
        "kubectl_runc": "crictl_runc",
        "kubectl_gvisor_bare": "kubectl_runc",
        "crictl_runc": None,
        "docker": "crictl",
    }
    for command, argv in COMMANDS.items():
        for method, (label, _) in found.items():
            base = baselines.get(method)
            section.figure(
                f"exec.{command}.{method}",
                f"exec `{' '.join(argv)}`: {label}",
                "ms",
                samples[(method, command)],
                baseline=f"exec.{command}.{base}" if base else None,
                floor=f"exec.{command}.crictl" if method not in ("crictl", "crictl_runc") else None,
                group=f"latency-{command}",
                group_title=f"exec `{' '.join(argv)}` latency",
                label=label,
                headline=method == "client",
            )

    # Throughput: N callers in parallel, each running `true` back to back.
    duration = ctx.seconds(5.0, 1.0)
    callers = [1, 2, 4, 8]
    lines: dict[str, list[list[float]]] = {}
    for method in ("client", "kubectl", "crictl", "docker"):
        if method not in found:
            continue
        label, call = found[method]
        lines[label] = []
        for count in callers:
            done = _throughput(call, COMMANDS["true"], count, duration)
            rate = done / duration
            lines[label].append([count, rate])
            section.figure(
                f"exec.throughput.{method}.{count}",
                f"exec `true` throughput, {count} parallel callers: {label}",
                "execs/s",
                value=rate,
                baseline=f"exec.throughput.crictl.{count}" if method != "crictl" else None,
                higher_is_better=True,
            )
        ctx.log(f"exec: throughput {method} done")
    section.series["throughput"] = {
        "title": "exec `true` throughput against parallel callers",
        "xlabel": "parallel callers",
        "ylabel": "execs/s",
        "lines": lines,
    }
    section.notes.append(
        "The client runs every command under its supervisor (`python3 -c <supervisor>` "
        "inside the sandbox: timeout, output cap, process-tree kill), so even `true` costs "
        "a Python start-up in gVisor; `client_raw` is the same websocket without it. "
        "kubectl, crictl and docker figures include starting the CLI process (~10-30 ms of "
        "Go start-up); the client runs in-process with a warm connection pool. Client "
        "callers for throughput are threads of one Python process sharing one Client."
    )


def _throughput(
    call: Callable[[list[str]], bytes], argv: list[str], count: int, seconds: float
) -> int:
    deadline = time.monotonic() + seconds
    done = [0] * count
    barrier = threading.Barrier(count)

    def loop(index: int) -> None:
        barrier.wait()
        while True:
            call(argv)
            if time.monotonic() > deadline:
                return
            done[index] += 1

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(done)
