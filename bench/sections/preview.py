"""Preview: added latency of a small GET through a warm preview link, and MB/s of a large one.

A stdlib HTTP/1.1 server listens on 127.0.0.1 inside a sandbox. The same GET is made
(a) through the preview proxy on one kept-alive connection (warm: the tunnel is open),
(b) through the proxy on a new connection each time (cold: a new pods/exec tunnel), and
(c) without the proxy, as a plain pods/exec running a stdlib HTTP client in the sandbox
(what a caller would do without previews). Large: the same body through (a) and (c).
"""

from __future__ import annotations

import http.client
import json
import time
from typing import Any
from urllib.parse import urlsplit

from bench import env
from bench.cluster_side import delete_namespace, make_namespace
from bench.results import Section
from openblox.client import Client
from openblox.transport import ExecOutput, ExecSocket, Session

TITLES = {
    "preview": "Preview: a small GET through a warm preview link vs pods/exec; large GET MB/s"
}
PORT = 8000
APP = r"""
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class App(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *args):
        pass
    def do_GET(self):
        size = int(self.path.split("=", 1)[1]) if "=" in self.path else 2
        self.send_response(200)
        self.send_header("Content-Length", str(size))
        self.end_headers()
        block = b"x" * 262144
        while size:
            part = block[: min(size, len(block))]
            self.wfile.write(part)
            size -= len(part)
ThreadingHTTPServer.daemon_threads = True
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), App).serve_forever()
"""
# The floor: the same GET made inside the sandbox on loopback, kept alive.
LOOPBACK = r"""
import http.client, json, sys, time
conn = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]))
samples = []
for _ in range(int(sys.argv[2]) + 1):
    started = time.monotonic()
    conn.request("GET", "/")
    conn.getresponse().read()
    samples.append((time.monotonic() - started) * 1000)
print(json.dumps(samples[1:]))
"""
FETCH = (
    "import sys, urllib.request; "
    "sys.stdout.buffer.write(urllib.request.urlopen(sys.argv[1]).read())"
)


def _proxy_address() -> str:
    return env.kubectl(
        "get",
        "service",
        "openblox-preview",
        "-n",
        "openblox-system",
        "-o",
        "jsonpath={.spec.clusterIP}",
    ).strip()


def _get(conn: http.client.HTTPConnection, path: str) -> int:
    conn.request("GET", path)
    response = conn.getresponse()
    size, head = 0, b""
    while chunk := response.read(1 << 20):
        size += len(chunk)
        head = head or chunk[:300]
    if response.status != 200:
        detail = head.decode(errors="replace").strip()
        raise RuntimeError(f"preview GET answered {response.status}: {detail}")
    return size


def _exec_get(session: Session, namespace: str, pod: str, path: str) -> int:
    socket = ExecSocket(
        session,
        namespace,
        pod,
        "sandbox",
        ["python3", "-c", FETCH, f"http://127.0.0.1:{PORT}{path}"],
        stdin=False,
        timeout=30,
    )
    # The body is counted, not kept: it is what the preview path serves, megabytes of it.
    output = socket.read_to_end(time.monotonic() + 300, ExecOutput(keep_stdout=0))
    if output.exit_code != 0:
        raise RuntimeError(f"exec GET failed: {output.status[:200]!r}")
    return output.stdout_seen


def run(ctx: Any, section: Section) -> None:
    kube = ctx.kube
    small = ctx.n(200, 20)
    large = ctx.n(256, 16) << 20
    repeats = ctx.n(3, 1)
    namespace = make_namespace(kube, f"obx-bench-preview-{ctx.run_id}", sandboxes=True)
    ctx.cleanup(delete_namespace, kube, namespace)
    client = Client(namespace, kubeconfig=env.KUBECONFIG)
    sandbox = client.create("code-exec", name="preview", timeout=300)
    ctx.cleanup(sandbox.delete)
    sandbox.files.write("/tmp/app.py", APP)
    sandbox.start_process("app", ["python3", "/tmp/app.py", str(PORT)])
    host = _proxy_address()
    path = urlsplit(sandbox.preview_url(PORT, ttl=3600)).path
    deadline = time.monotonic() + 60
    while True:
        try:
            _get(http.client.HTTPConnection(host, 80, timeout=30), path)
            break
        except (OSError, RuntimeError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    session = client._io.session

    warm, cold, plain = [], [], []
    conn = http.client.HTTPConnection(host, 80, timeout=60)
    _get(conn, path)
    for _ in range(small):
        started = time.monotonic()
        _get(conn, path)
        warm.append((time.monotonic() - started) * 1000)
    conn.close()
    cold_failures: list[str] = []
    for _ in range(ctx.n(30, 5)):
        fresh = http.client.HTTPConnection(host, 80, timeout=60)
        started = time.monotonic()
        try:
            _get(fresh, path)
            cold.append((time.monotonic() - started) * 1000)
        except RuntimeError as error:  # counted and shown, never folded into the latency
            cold_failures.append(str(error))
        fresh.close()
        started = time.monotonic()
        _exec_get(session, namespace, sandbox.pod, "/")
        plain.append((time.monotonic() - started) * 1000)
    result = sandbox.exec(["python3", "-c", LOOPBACK, str(PORT), str(small)])
    loopback = json.loads(result.stdout)
    ctx.log(f"preview: {small} warm, {len(cold)} cold and exec GETs")

    through, direct = [], []
    conn = http.client.HTTPConnection(host, 80, timeout=300)
    for _ in range(repeats):
        started = time.monotonic()
        if _get(conn, f"{path}?n={large}") != large:
            raise RuntimeError("the large preview GET came back short")
        through.append(large / 1e6 / (time.monotonic() - started))
        started = time.monotonic()
        if _exec_get(session, namespace, sandbox.pod, f"/?n={large}") != large:
            raise RuntimeError("the large exec GET came back short")
        direct.append(large / 1e6 / (time.monotonic() - started))
    conn.close()

    section.figure(
        "preview.get.warm",
        "small GET through a warm preview link (kept-alive connection)",
        "ms",
        warm,
        baseline="preview.get.exec",
        floor="preview.get.loopback",
        headline=True,
    )
    section.figure(
        "preview.get.loopback",
        "the same GET inside the sandbox on loopback, kept alive (the floor)",
        "ms",
        loopback,
    )
    section.figure("preview.get.cold", "small GET through the proxy, new connection", "ms", cold)
    section.figure(
        "preview.get.cold_failed",
        f"new-connection GETs that failed (of {len(cold) + len(cold_failures)})",
        "GETs",
        value=len(cold_failures),
    )
    if cold_failures:
        section.notes.append(f"first failed new-connection GET: {cold_failures[0]}")
    section.figure(
        "preview.get.exec", "the same GET as a plain pods/exec (stdlib client inside)", "ms", plain
    )
    section.figure(
        "preview.large.proxy",
        f"{large >> 20} MiB GET through a warm preview link",
        "MB/s",
        through,
        baseline="preview.large.exec",
        higher_is_better=True,
        headline=True,
    )
    section.figure(
        "preview.large.exec",
        f"{large >> 20} MiB GET as a plain pods/exec, body on stdout",
        "MB/s",
        direct,
        higher_is_better=True,
    )
    section.notes.append(
        "The proxy is the openblox-preview Service, reached at its ClusterIP from the node. "
        "Warm: one HTTP/1.1 connection, so one pods/exec tunnel carries every request. "
        "Cold: a new connection per request, so each pays a new exec and the relay's start "
        "in gVisor. Added latency of a warm link = its p50 minus the loopback floor's. "
        "The small body is 2 bytes; MB/s = 10^6 bytes per second of wall time."
    )
