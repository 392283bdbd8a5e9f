"""Preview links on the real cluster: a server on a loopback port inside a gVisor sandbox,
reached through the preview proxy Deployment, which gets there over pods/exec only."""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import re
import secrets
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
import websocket

from openblox.client import Client, Sandbox
from openblox.client.preview import read_key_ring
from openblox.preview.tokens import Grant, sign
from tests.cluster.kubectl import Kube
from tests.cluster.sandboxes import opted_in_namespace, wait_for

pytestmark = pytest.mark.cluster

SYSTEM = "openblox-system"
SECRET = "openblox-preview-keys"
APP_PORT = 8000
# The app again on its own port, for the expiry test alone, so its relays can be counted.
EXPIRY_PORT = APP_PORT + 2
# Long enough to open a websocket through the API server and kubelet, short for a test.
SHORT_TTL = 15
# How late past a link's expiry its websocket may still be open: the proxy cuts at the
# expiry itself, so this is the close's way back through the Service on a busy node.
CUT_BOUND = 3.0

# A stdlib HTTP/1.1 app: /hello (names its TCP connection), /big?n=, POST /echo, /ws echo.
APP = r"""
import base64, hashlib, socketserver, struct, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class App(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, body, kind="text/plain"):
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path.startswith("/big"):
            size = int(self.path.split("=", 1)[1])
            self.send_response(200)
            self.send_header("Content-Length", str(size))
            self.end_headers()
            block = bytes(range(256)) * 1024
            left = size
            while left:
                part = block[: min(left, len(block))]
                self.wfile.write(part)
                left -= len(part)
            return
        if self.path == "/ws":
            return self.websocket()
        peer = "%s:%d" % self.client_address
        self.reply(("hello %s via %s prefix=%s" % (
            self.path, peer, self.headers.get("X-Forwarded-Prefix"))).encode())

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.reply(hashlib.sha256(body).hexdigest().encode())

    def websocket(self):
        key = self.headers["Sec-WebSocket-Key"]
        accept = base64.b64encode(hashlib.sha1(
            (key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        self.end_headers()
        self.wfile.flush()
        while True:
            head = self.rfile.read(2)
            if len(head) < 2:
                return
            opcode, size = head[0] & 15, head[1] & 127
            if size == 126:
                size = struct.unpack(">H", self.rfile.read(2))[0]
            elif size == 127:
                size = struct.unpack(">Q", self.rfile.read(8))[0]
            mask = self.rfile.read(4) if head[1] & 128 else b"\0\0\0\0"
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(self.rfile.read(size)))
            if opcode == 8:
                self.wfile.write(b"\x88\x00")
                return
            if size < 126:
                out = bytes([128 | opcode, size])
            elif size < 65536:
                out = bytes([128 | opcode, 126]) + struct.pack(">H", size)
            else:
                out = bytes([128 | opcode, 127]) + struct.pack(">Q", size)
            self.wfile.write(out + data)
            self.wfile.flush()

ThreadingHTTPServer.daemon_threads = True
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), App).serve_forever()
"""


# Prints how many preview relays in the sandbox serve port argv[1]. A relay runs as
# `python3 -I -S -c <guest/relay_agent.py> PORT`; its source names "openblox-relay", which
# this program spells in two parts so that its own command line never matches.
COUNT_RELAYS = r"""
import os, sys
port, marker = sys.argv[1].encode(), ("openblox" + "-relay").encode()
count = 0
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open("/proc/%s/cmdline" % pid, "rb") as cmdline:
            argv = cmdline.read().split(b"\0")[:-1]
    except OSError:
        continue
    if argv[1:4] == [b"-I", b"-S", b"-c"] and len(argv) == 6 and argv[5] == port:
        count += marker in argv[4]
print(count)
"""


@pytest.fixture(scope="module")
def preview_ns(operator: Kube) -> Iterator[str]:
    with opted_in_namespace(operator, "t-preview") as name:
        yield name


@pytest.fixture(scope="module")
def client(operator: Kube, preview_ns: str) -> Client:
    return Client(preview_ns, kubeconfig=operator.kubeconfig)


@pytest.fixture(scope="module")
def box(operator: Kube, client: Client, preview_ns: str) -> Iterator[Sandbox]:
    sandbox = client.create("code-exec", "web")
    sandbox.files.write("/tmp/app.py", APP)
    sandbox.start_process("app", ["python3", "/tmp/app.py", str(APP_PORT)])
    yield sandbox
    sandbox.delete()


@pytest.fixture(scope="module")
def proxy(operator: Kube) -> dict[str, str]:
    """Addresses of the proxy: its Service's ClusterIP and its (single) pod's IP."""
    service = operator.get("service", "openblox-preview", SYSTEM)
    pods = json.loads(
        operator.kubectl(
            "get",
            "pods",
            "-n",
            SYSTEM,
            "-l",
            "app.kubernetes.io/name=openblox-preview",
            "-o",
            "json",
        ).stdout
    )["items"]
    running = [
        p
        for p in pods
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    ]
    assert len(running) == 1, "the tests expect one proxy replica"
    return {
        "service": service["spec"]["clusterIP"],
        "pod": running[0]["status"]["podIP"],
        "pod_name": running[0]["metadata"]["name"],
    }


def _local(url: str, host: str) -> tuple[str, str]:
    """(host, path) of a preview URL, aimed at this cluster's address of the proxy."""
    return host, urlsplit(url).path


def _get(host: str, path: str, port: int = 80, timeout: float = 30) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def _counter(pod_ip: str, name: str, *labels: str) -> float:
    """The proxy's counter `name`, summed over the series whose labels include `labels`
    (each `key="value"`)."""
    text = urllib.request.urlopen(f"http://{pod_ip}:9090/metrics", timeout=10).read().decode()
    return sum(
        float(m.group(2))
        for m in re.finditer(rf"^{name}_total\{{([^}}]*)\}} (\S+)$", text, re.M)
        if all(label in m.group(1).split(",") for label in labels)
    )


def _api_requests(pod_ip: str) -> float:
    return _counter(pod_ip, "openblox_preview_api_requests")


@pytest.fixture(scope="module")
def link(box: Sandbox, proxy: dict[str, str]) -> str:
    url = box.preview_url(APP_PORT, ttl=600)
    host, path = _local(url, proxy["service"])
    # The app starts in the background: wait until it answers through the proxy.
    wait_for(
        "the app to answer through the proxy",
        lambda: _get(host, path + "hello")[0] == 200,
        timeout=60,
        every=1,
    )
    return path


def test_a_loopback_server_in_the_sandbox_answers_through_the_proxy(
    proxy: dict[str, str], link: str
) -> None:
    status, body = _get(proxy["service"], link + "hello?x=1")
    assert status == 200
    assert body.startswith(b"hello /hello?x=1 via 127.0.0.1:")
    assert f"prefix={link.rstrip('/')}".encode() in body


def test_keep_alive_carries_two_requests_on_one_connection(
    proxy: dict[str, str], link: str
) -> None:
    conn = http.client.HTTPConnection(proxy["service"], 80, timeout=30)
    peers = []
    started = time.monotonic()
    for _ in range(2):
        conn.request("GET", link + "hello")
        response = conn.getresponse()
        assert response.status == 200
        assert response.getheader("Connection") != "close"
        peers.append(response.read().split(b" via ")[1].split(b" ")[0])
    conn.close()
    # One client connection, one tunnel: the app saw the same TCP peer both times.
    assert peers[0] == peers[1], peers
    assert time.monotonic() - started < 20


def test_a_large_body_streams_both_ways(proxy: dict[str, str], link: str) -> None:
    size = 32 << 20
    conn = http.client.HTTPConnection(proxy["service"], 80, timeout=120)
    started = time.monotonic()
    conn.request("GET", f"{link}big?n={size}")
    response = conn.getresponse()
    assert response.status == 200
    received = 0
    expected = bytes(range(256)) * 4
    first = response.read(1024)
    assert first == expected
    received += len(first)
    while chunk := response.read(1 << 20):
        received += len(chunk)
    seconds = time.monotonic() - started
    assert received == size
    print(
        f"\npreview download: {size / seconds / 1e6:.1f} MB/s ({size >> 20} MiB in {seconds:.2f}s)"
    )
    payload = secrets.token_bytes(8 << 20)
    conn.request("POST", link + "echo", body=payload)
    reply = conn.getresponse()
    assert reply.status == 200

    assert reply.read().decode() == hashlib.sha256(payload).hexdigest()
    conn.close()


def test_a_websocket_echoes_through_the_proxy(proxy: dict[str, str], link: str) -> None:
    ws = websocket.create_connection(f"ws://{proxy['service']}{link}ws", timeout=30)
    try:
        for message in ("hello", "ünïcødé ✓", "x" * 70_000):
            ws.send(message)
            assert ws.recv() == message
        ws.send_binary(bytes(range(256)))
        assert ws.recv() == bytes(range(256))
    finally:
        ws.close()


def _expiry(path: str) -> int:
    """The expiry (Unix seconds) a link's token carries."""
    payload = path.split("/")[2].split(".")[2]
    expires: int = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))["exp"]
    return expires


def _relays(box: Sandbox, port: int) -> int:
    result = box.exec(["python3", "-c", COUNT_RELAYS, str(port)])
    assert result.exit_code == 0, result.stderr
    return int(result.stdout)


def test_a_websocket_opened_before_its_link_expires_is_closed_at_the_expiry(
    box: Sandbox, proxy: dict[str, str]
) -> None:
    box.start_process("app-expiry", ["python3", "/tmp/app.py", str(EXPIRY_PORT)])
    try:
        ready = urlsplit(box.preview_url(EXPIRY_PORT, ttl=600)).path
        wait_for(
            "the second app to answer through the proxy",
            lambda: _get(proxy["service"], ready + "hello")[0] == 200,
            timeout=60,
            every=1,
        )
        cuts = 'reason="expired"', 'phase="piped"'
        before = _counter(proxy["pod"], "openblox_preview_cuts", *cuts)
        path = urlsplit(box.preview_url(EXPIRY_PORT, ttl=SHORT_TTL)).path
        expires = _expiry(path)
        ws = websocket.create_connection(f"ws://{proxy['service']}{path}ws", timeout=5)
        try:
            assert _relays(box, EXPIRY_PORT) >= 1, "the open websocket's relay is not counted"
            last_echo, closed = _echo_until_closed(ws, expires + 30)
        finally:
            ws.close()
        # It relayed until the link's last seconds, then the proxy cut it at the expiry.
        assert last_echo > expires - 3, f"the last echo came {expires - last_echo:.1f}s early"
        assert last_echo <= expires + 1, f"an echo came {last_echo - expires:.1f}s past expiry"
        assert closed is not None, "the websocket was still open 30s after its link expired"
        assert closed <= expires + CUT_BOUND, f"closed {closed - expires:.1f}s after expiry"
        assert _counter(proxy["pod"], "openblox_preview_cuts", *cuts) > before
        # The relay in the sandbox, and with it the app's connection, ended too.
        wait_for("the relay to end", lambda: _relays(box, EXPIRY_PORT) == 0, timeout=30, every=1)
    finally:
        box.stop_process("app-expiry")


def _echo_until_closed(ws: websocket.WebSocket, give_up: float) -> tuple[float, float | None]:
    """Echoes a message every quarter second until the connection ends: (when the last
    echo came, when it ended or None), as time.time()."""
    last_echo, sent = 0.0, 0
    while time.time() < give_up:
        sent += 1
        try:
            ws.send(f"ping {sent}")
            echo = ws.recv()
        except websocket.WebSocketTimeoutException:
            continue  # open but silent: keep trying until it ends or we give up
        except (websocket.WebSocketException, OSError):
            return last_echo, time.time()
        # Any ping's echo: after a timeout, an earlier one's may come now.
        assert isinstance(echo, str) and echo.startswith("ping "), echo
        last_echo = time.time()
        time.sleep(0.25)
    return last_echo, None


def _tampered(token: str) -> str:
    version, key_id, payload, signature = token.split(".")
    body = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    body["p"] = 22
    raw = base64.urlsafe_b64encode(json.dumps(body).encode()).rstrip(b"=").decode()
    return f"{version}.{key_id}.{raw}.{signature}"


def test_bad_tokens_get_403_before_any_api_request(
    client: Client, box: Sandbox, proxy: dict[str, str], link: str
) -> None:
    good = link.split("/")[2]
    key_id, key = client._io.run(read_key_ring()).signing_key()
    uid = box._body["metadata"]["uid"]
    now = int(time.time())
    bad = {
        "forged": sign(Grant(box.namespace, box.name, uid, APP_PORT, now + 600), key_id, b"f" * 32),
        "expired": sign(Grant(box.namespace, box.name, uid, APP_PORT, now - 1), key_id, key),
        "tampered": _tampered(good),
        "unknown-key": sign(Grant(box.namespace, box.name, uid, APP_PORT, now + 600), "nokey", key),
        "malformed": "v1.x.y.z",
    }
    before = _api_requests(proxy["pod"])
    for what, token in bad.items():
        conn = http.client.HTTPConnection(proxy["pod"], 8080, timeout=30)
        conn.request("POST", f"/p/{token}/echo", body=b"never read")
        response = conn.getresponse()
        body = json.loads(response.read())
        conn.close()
        assert response.status == 403, what
        expected = "forged" if what == "tampered" else what
        assert body == {"error": "forbidden", "reason": expected}, what
    assert _api_requests(proxy["pod"]) == before, "a refused token caused an API request"
    # The counter does move for a good link that needs a new tunnel.
    assert _get(proxy["pod"], link + "hello", port=8080)[0] == 200
    assert _api_requests(proxy["pod"]) > before


def test_a_link_for_another_sandbox_uid_is_404_and_nothing_listening_is_502(
    client: Client, box: Sandbox, proxy: dict[str, str], link: str
) -> None:
    # A Sandbox deleted and made again under the same name is not reachable by old links.
    key_id, key = client._io.run(read_key_ring()).signing_key()
    stale = Grant(
        box.namespace, box.name, "uid-of-an-earlier-sandbox", APP_PORT, int(time.time()) + 60
    )
    status, body = _get(proxy["service"], f"/p/{sign(stale, key_id, key)}/hello")
    assert status == 404, body
    status, body = _get(proxy["service"], urlsplit(box.preview_url(APP_PORT + 1)).path)
    assert status == 502, body
    assert b"connect 127.0.0.1:8001" in body


def test_every_new_tunnel_says_why_nothing_answered(
    box: Sandbox, proxy: dict[str, str], link: str
) -> None:
    # Each request opens a tunnel whose exec is written while it is read: the relay's
    # own message must come back every time, never a stream that just ended.
    path = urlsplit(box.preview_url(APP_PORT + 1)).path
    for i in range(60):
        status, body = _get(proxy["service"], path)
        assert (status, b"connect 127.0.0.1:8001" in body) == (502, True), (i, body)


def test_an_old_link_never_reaches_a_namesake_made_after_it(
    client: Client, proxy: dict[str, str]
) -> None:
    first = client.create("code-exec", "namesake")
    old_link = urlsplit(first.preview_url(APP_PORT)).path
    # Through the proxy once, so it has looked the pod up (nothing listens: 502).
    assert _get(proxy["service"], old_link)[0] == 502
    first.delete()
    wait_for("the first namesake to go", lambda: _gone(client, "namesake"))
    second = client.create("code-exec", "namesake")
    try:
        status, body = _get(proxy["service"], old_link)
        assert status == 404, body
        assert _get(proxy["service"], urlsplit(second.preview_url(APP_PORT)).path)[0] == 502
    finally:
        second.delete()


def _gone(client: Client, name: str) -> bool:
    return all(sandbox.name != name for sandbox in client.list())


def _patch_secret(kube: Kube, patch: list[dict[str, object]], pod_name: str) -> None:
    kube.kubectl("patch", "secret", SECRET, "-n", SYSTEM, "--type=json", "-p", json.dumps(patch))
    # A pod update makes the kubelet sync the pod now, refreshing the Secret volume
    # without waiting for its periodic resync.
    kube.kubectl(
        "annotate",
        "pod",
        pod_name,
        "-n",
        SYSTEM,
        f"openblox.sh/keys-touched={time.time()}",
        "--overwrite",
    )


def test_rotation_keeps_old_links_until_the_old_key_is_removed(
    operator: Kube, client: Client, box: Sandbox, proxy: dict[str, str], link: str
) -> None:
    old_id, _ = client._io.run(read_key_ring()).signing_key()
    new_id = f"k-{secrets.token_hex(4)}"
    new_key = base64.b64encode(secrets.token_urlsafe(48).encode()).decode()
    host = proxy["service"]

    def status(path: str) -> int:
        return _get(host, path + "hello")[0]

    # 1. Add the new key and make it current.
    _patch_secret(
        operator,
        [
            {"op": "add", "path": f"/data/{new_id}", "value": new_key},
            {
                "op": "replace",
                "path": "/data/current",
                "value": base64.b64encode(new_id.encode()).decode(),
            },
        ],
        proxy["pod_name"],
    )
    new_link = urlsplit(box.preview_url(APP_PORT, ttl=600)).path
    assert f"/p/v1.{new_id}." in new_link
    wait_for("the proxy to load the new key", lambda: status(new_link) == 200, timeout=150, every=2)
    assert status(link) == 200, "an old link must stay valid while its key is in the ring"
    # 2. Remove the old key: its links die; the new ones live.
    _patch_secret(operator, [{"op": "remove", "path": f"/data/{old_id}"}], proxy["pod_name"])
    wait_for("the proxy to drop the old key", lambda: status(link) == 403, timeout=150, every=2)
    assert json.loads(_get(host, link + "hello")[1])["reason"] == "unknown-key"
    assert status(new_link) == 200


def test_the_command_line_prints_a_working_link(
    operator: Kube, preview_ns: str, box: Sandbox, proxy: dict[str, str], link: str
) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "openblox.cli",
            "--kubeconfig",
            operator.kubeconfig,
            "-n",
            preview_ns,
            "--json",
            "preview",
            box.name,
            str(APP_PORT),
            "--ttl",
            "120",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    url = json.loads(out.stdout)["url"]
    assert url.startswith("http://openblox-preview.openblox-system.svc/p/v1.")
    status, body = _get(proxy["service"], urlsplit(url).path + "hello")
    assert status == 200, body


def test_the_proxy_runs_unprivileged_and_can_only_read_and_exec(
    operator: Kube, proxy: dict[str, str]
) -> None:
    pod = operator.get("pod", proxy["pod_name"], SYSTEM)
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    container = pod["spec"]["containers"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert container["resources"]["limits"]["memory"]
    sa = "system:serviceaccount:openblox-system:openblox-preview"

    def can(*args: str) -> bool:
        result = operator.kubectl("auth", "can-i", *args, "--as", sa, check=False)
        return result.stdout.strip() == "yes"

    assert can("get", "sandboxes.openblox.sh", "-n", "default")
    assert can("create", "pods", "--subresource=exec", "-n", "default")
    for forbidden in (
        ("list", "pods", "-n", "default"),
        ("create", "pods", "-n", "default"),
        ("get", "secrets", "-n", SYSTEM),
        ("patch", "sandboxes.openblox.sh", "-n", "default"),
    ):
        assert not can(*forbidden), forbidden
