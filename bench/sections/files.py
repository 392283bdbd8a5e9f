"""Files: MB/s of a 100 MB write and read through sandbox.files, against plain exec pipes.

The client moves files as the stdin and stdout of an exec (argv, never a shell string);
the baselines move the same bytes with `kubectl exec -i … cat` (the same API path without
the client) and `crictl exec -i` on the node (no API server: the floor).
"""

from __future__ import annotations

import hashlib
import os
import time
from typing import Any

from bench import env
from bench.cluster_side import delete_namespace, make_namespace
from bench.results import Section
from bench.sections.exec_latency import container_id
from openblox.client import Client

TITLES = {"files": "Files: 100 MB write and read through sandbox.files vs exec pipes"}


def run(ctx: Any, section: Section) -> None:
    kube = ctx.kube
    size = ctx.n(100, 10) * 1000 * 1000
    repeats = ctx.n(3, 1)
    namespace = make_namespace(kube, f"obx-bench-files-{ctx.run_id}", sandboxes=True)
    ctx.cleanup(delete_namespace, kube, namespace)
    client = Client(namespace, kubeconfig=env.KUBECONFIG)
    sandbox = client.create("code-exec", name="files", timeout=300)
    ctx.cleanup(sandbox.delete)
    cid = container_id(namespace, sandbox.pod)
    data = os.urandom(size)
    digest = hashlib.sha256(data).hexdigest()
    kubectl = env.kubectl_argv("exec", "-i", "-n", namespace, sandbox.pod, "-c", "sandbox", "--")
    crictl = env.crictl_argv("exec", "-i", cid)

    def check(path: str) -> None:
        result = sandbox.exec(["sha256sum", path])
        if not result.stdout.startswith(digest.encode()):
            raise RuntimeError(f"{path} arrived corrupted: {result.stdout[:80]!r}")
        sandbox.exec(["rm", "-f", path])

    writes: dict[str, list[float]] = {"client": [], "kubectl": [], "crictl": []}
    reads: dict[str, list[float]] = {"client": [], "kubectl": [], "crictl": []}
    for attempt in range(repeats):
        for method in ("client", "kubectl", "crictl"):
            path = f"/workspace/bench-{method}-{attempt}.bin"
            started = time.monotonic()
            if method == "client":
                sandbox.files.write(path, data)
            else:
                prefix = kubectl if method == "kubectl" else crictl
                env.run([*prefix, "sh", "-c", 'cat > "$0"', path], stdin=data, timeout=600)
            writes[method].append(size / 1e6 / (time.monotonic() - started))
            started = time.monotonic()
            if method == "client":
                back = sandbox.files.read(path, limit=size + 1)
            else:
                prefix = kubectl if method == "kubectl" else crictl
                back = env.run([*prefix, "cat", path], timeout=600).stdout
            reads[method].append(size / 1e6 / (time.monotonic() - started))
            if hashlib.sha256(back).hexdigest() != digest:
                raise RuntimeError(f"{method} read back {len(back)} bytes that differ")
            check(path)
        ctx.log(f"files: {attempt + 1}/{repeats}")

    labels = {
        "client": "sandbox.files",
        "kubectl": "kubectl exec -i (cat)",
        "crictl": "crictl exec -i on the node (cat)",
    }
    for direction, results in (("write", writes), ("read", reads)):
        for method, samples in results.items():
            section.figure(
                f"files.{direction}.{method}",
                f"{size // 1_000_000} MB {direction}: {labels[method]}",
                "MB/s",
                samples,
                baseline=f"files.{direction}.kubectl" if method == "client" else None,
                floor=f"files.{direction}.crictl" if method != "crictl" else None,
                higher_is_better=True,
                headline=method == "client",
            )
    section.notes.append(
        f"Random bytes, {size // 1_000_000} MB (10^6), to /workspace (a memory-backed emptyDir "
        "in the code-exec profile); each copy is verified with sha256 inside the sandbox "
        "and on the way back, then removed. MB/s = 10^6 bytes per second of wall time, "
        "including the exec set-up."
    )
