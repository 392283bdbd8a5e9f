"""Surfaces at the edges a caller touches, without a cluster: the preview proxy's
requests (a real PreviewServer on loopback), the client's arguments (a Sandbox handle
whose exec transport records what it would send), and the command line (``main`` with a
kubeconfig whose server is a loopback port nothing listens on)."""

from __future__ import annotations

import contextlib
import functools
import io
import json
import socket
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

from openblox.cli.main import main
from openblox.client import InvalidArgument, Sandbox
from openblox.client.sandbox_steps import SandboxSteps
from openblox.client.sync_io import SyncIO
from openblox.preview import tokens
from openblox.preview.http11 import HTTPError
from openblox.preview.server import PreviewServer
from openblox.transport.rest import Call
from tests.fuzz.oracle import Violation, clear
from tests.fuzz.pure import SCALARS, VALUES
from tests.fuzz.runner import Surface

# --- preview requests ---------------------------------------------------------------------

KEY = b"p" * 32


class _RefusingBackend:
    """Counts tunnels asked for; opens none (the sandbox is 'unreachable')."""

    def __init__(self) -> None:
        self.opened: list[tokens.Grant] = []

    def open(self, grant: tokens.Grant) -> Any:
        self.opened.append(grant)
        raise HTTPError(503, "no sandbox here")


class _Proxy:
    def __init__(self) -> None:
        self.backend = _RefusingBackend()
        self.server = PreviewServer(("127.0.0.1", 0), lambda: {"k1": KEY}, self.backend)
        self.port = self.server.server_address[1]
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()


@functools.cache
def _proxy() -> _Proxy:
    """One proxy for every case: it must keep answering whatever came before."""
    return _Proxy()


def _valid_token() -> str:
    grant = tokens.Grant("ns", "sb", "uid", 8080, int(time.time()) + 600)
    return tokens.sign(grant, "k1", KEY)


HEADER_TEXT = st.text(st.characters(codec="latin-1", exclude_characters="\n"), max_size=20)
HEADERS = st.lists(
    st.one_of(
        st.tuples(HEADER_TEXT, HEADER_TEXT),
        st.tuples(
            st.sampled_from(
                ["Content-Length", "Transfer-Encoding", "Connection", "Upgrade", "Expect"]
            ),
            st.sampled_from(
                ["5", "-1", "chunked", "gzip, chunked", "close", "upgrade", "x", "1e3", ""]
            ),
        ),
    ),
    max_size=6,
)
TARGETS = st.one_of(
    st.just("/healthz"),
    st.builds(lambda rest: f"/p/VALID{rest}", st.sampled_from(["", "/", "/a?b", "?q"])),
    st.builds(lambda t: f"/p/{t}/", st.text(max_size=40)),
    HEADER_TEXT,
)
REQUESTS = st.builds(
    lambda method, target, version, headers, body, ending: (
        method, target, version, headers, body, ending
    ),
    st.sampled_from(["GET", "POST", "PUT", "CONNECT", "get", "", "G ET"]),
    TARGETS,
    st.sampled_from(["HTTP/1.1", "HTTP/1.0", "HTTP/2", "", "HTTP/1.1 extra"]),
    HEADERS,
    st.binary(max_size=64),
    st.sampled_from(["\r\n", "\n"]),
)  # fmt: skip


def _request_bytes(case: tuple[str, str, str, list[tuple[str, str]], bytes, str]) -> bytes:
    method, target, version, headers, body, ending = case
    target = target.replace("VALID", _valid_token())
    lines = [f"{method} {target} {version}".strip(), *(f"{k}: {v}" for k, v in headers)]
    return (ending.join(lines) + ending + ending).encode("latin-1", "replace") + body


def _exchange(port: int, raw: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.settimeout(5)
        with contextlib.suppress(OSError):
            conn.sendall(raw)
            conn.shutdown(socket.SHUT_WR)
        reply = b""
        with contextlib.suppress(TimeoutError, OSError):
            while data := conn.recv(65536):
                reply += data
    return reply


def check_request(case: tuple[str, str, str, list[tuple[str, str]], bytes, str]) -> str:
    proxy = _proxy()
    opened_before = len(proxy.backend.opened)
    raw = _request_bytes(case)
    reply = _exchange(proxy.port, raw)
    if len(proxy.backend.opened) > opened_before and "/p/VALID" not in case[1]:
        raise Violation("weaker", "a tunnel was asked for without a valid token")
    if not reply:
        return "closed without an answer"
    start = reply.split(b"\r\n", 1)[0].decode("latin-1")
    parts = start.split(" ", 2)
    if len(parts) < 2 or parts[0] != "HTTP/1.1" or not parts[1].isdigit():
        raise Violation("unclear", f"not an HTTP answer: {start[:100]!r}")
    status = int(parts[1])
    if status >= 500 and status != 503:
        raise Violation("crash", f"the proxy answered {start!r}")
    if _exchange(proxy.port, b"GET /healthz HTTP/1.1\r\n\r\n")[:12] != b"HTTP/1.1 200":
        raise Violation("crash", "the proxy stopped answering its health check")
    if status >= 400:
        clear(reply.split(b"\r\n\r\n", 1)[-1].decode("latin-1"))
        return f"refused: {status}"
    return f"answered {status}"


PREVIEW_REQUESTS = Surface(
    "preview requests",
    "generated request lines, headers and bodies -> a PreviewServer on loopback",
    REQUESTS,
    check_request,
)

# --- the client's arguments ---------------------------------------------------------------


class _Reached(Exception):
    """The call got past the client's checks to the exec transport."""

    def __init__(self, argv: Sequence[Any]) -> None:
        super().__init__("reached the transport")
        self.argv = list(argv)


class _RecordingApi:
    def send(self, call: Call) -> Any:
        if "/secrets/" in call.path:
            raise _Reached(["preview key"])
        return {}  # the activity stamp


class _RecordingIO(SyncIO):
    """Stands in for the client's I/O: records what would reach the API server."""

    def __init__(self) -> None:  # no session: nothing is sent
        self.api = _RecordingApi()  # type: ignore[assignment]

    def open_exec(self, namespace: str, pod: str, argv: Sequence[Any], **_: Any) -> Any:
        raise _Reached(argv)


TIMEOUT_S, OUTPUT_CAP = 60, 1 << 20
BODY = {
    "metadata": {"name": "sb", "namespace": "ns", "uid": "u"},
    "spec": {"profile": "code-exec"},
    "status": {
        "podName": "sb",
        "execLimits": {"timeoutSeconds": TIMEOUT_S, "outputBytes": OUTPUT_CAP, "processes": 256},
    },
}
ARGV = st.one_of(
    st.lists(st.text(max_size=12), min_size=1, max_size=4),
    st.lists(VALUES, max_size=3),
    st.text(max_size=10),
    st.none(),
)
SHORT = st.text(max_size=8)
CALLS = st.one_of(
    # Near-valid calls, so the accepted path is exercised as often as the refusals.
    st.tuples(
        st.just("exec"),
        st.fixed_dictionaries(
            {
                "argv": st.lists(st.text(max_size=12), min_size=1, max_size=4),
                "timeout": st.one_of(st.none(), st.floats(0.001, 120), st.integers(-1, 61)),
                "output_limit": st.one_of(st.none(), st.integers(-1, (1 << 20) + 1)),
                "env": st.one_of(st.none(), st.dictionaries(SHORT, SHORT)),
                "cwd": st.one_of(st.none(), st.text(max_size=10)),
                "stdin": st.one_of(st.none(), st.binary(max_size=10), st.text(max_size=10)),
            }
        ),
    ),
    st.tuples(
        st.just("exec"),
        st.fixed_dictionaries(
            {
                "argv": ARGV,
                "timeout": st.one_of(st.none(), st.floats(), st.integers(-5, 10**6), SCALARS),
                "output_limit": st.one_of(st.none(), st.integers(-5, 1 << 22), SCALARS),
                "env": st.one_of(
                    st.none(), st.dictionaries(st.one_of(st.text(max_size=8), SCALARS), SCALARS)
                ),
                "cwd": st.one_of(st.none(), st.text(max_size=10), SCALARS),
                "stdin": st.one_of(st.none(), st.binary(max_size=10), SCALARS),
            }
        ),
    ),
    st.tuples(
        st.just("start_process"),
        st.fixed_dictionaries({"name": st.one_of(st.text(max_size=70), SCALARS), "argv": ARGV}),
    ),
    st.tuples(
        st.just("stop_process"),
        st.fixed_dictionaries({"name": st.just("web"), "grace": st.one_of(st.floats(), SCALARS)}),
    ),
    st.tuples(
        st.just("logs"),
        st.fixed_dictionaries(
            {
                "name": st.one_of(st.just("web"), SCALARS),
                "stream": st.one_of(st.sampled_from(["stdout", "stderr"]), SCALARS),
                "limit": st.one_of(st.integers(-5, 1 << 40), SCALARS),
            }
        ),
    ),
    st.tuples(
        st.just("preview_url"),
        st.fixed_dictionaries(
            {
                "port": st.one_of(st.integers(-5, 70000), SCALARS),
                "ttl": st.one_of(st.floats(), SCALARS),
            }
        ),
    ),
)  # fmt: skip


def _positional(method: str, arguments: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    first = {"exec": "argv", "start_process": "name", "stop_process": "name", "logs": "name"}
    first["preview_url"] = "port"
    rest = dict(arguments)
    args = [rest.pop(first[method])]
    if method == "start_process":
        args.append(rest.pop("argv"))
    return args, rest


def check_client_call(case: tuple[str, dict[str, Any]]) -> str:
    method, arguments = case
    sandbox = Sandbox(_RecordingIO(), SandboxSteps(BODY, {}, threading.Lock()))
    args, kwargs = _positional(method, arguments)
    try:
        getattr(sandbox, method)(*args, **kwargs)
    except InvalidArgument as error:
        clear(str(error))
        return "refused: InvalidArgument"
    except _Reached as reached:
        _judge_sent(method, arguments, reached.argv)
        return "accepted"
    raise Violation("crash", "the call returned without reaching the transport")


def _judge_sent(method: str, arguments: dict[str, Any], sent: list[Any]) -> None:
    if not all(isinstance(part, str) and "\0" not in part for part in sent):
        raise Violation("unclear", f"non-string or NUL argument sent to the sandbox: {sent!r:.200}")
    if method == "exec":
        mode_at = sent.index("run")
        timeout, cap = float(sent[mode_at + 1]), int(sent[mode_at + 2])
        if not (0 < timeout <= TIMEOUT_S) or not (0 <= cap <= OUTPUT_CAP):
            raise Violation("weaker", f"limits {timeout}s / {cap} B past the profile's")
        if sent[sent.index("--") + 1 :] != list(arguments["argv"]):
            raise Violation("unclear", "argv was not sent verbatim")


CLIENT_ARGS = Surface(
    "client arguments",
    "generated arguments -> Sandbox.exec, start_process, stop_process, logs, preview_url",
    CALLS,
    check_client_call,
)

# --- the command line ---------------------------------------------------------------------

WORDS = st.sampled_from(
    [
        "run", "create", "exec", "ls", "rm", "profiles", "cp", "start", "ps", "stop", "logs",
        "preview", "--json", "-n", "ns", "--kubeconfig", "--profile", "--timeout", "nan", "-1",
        "1e999", "--stdin", "--", "sb", "sb:/tmp/x", "/tmp/x", "--grace", "--stream", "stderr",
        "--limit", "--ttl", "--base-url", "0", "65536", "80", "python3", "-c", "print(1)",
        "--help", "-h",
    ]
)  # fmt: skip
CLI_ARGV = st.lists(st.one_of(WORDS, WORDS, st.text(max_size=12)), max_size=8)


@contextlib.contextmanager
def _unreachable_kubeconfig() -> Iterator[str]:
    """A kubeconfig whose server is a loopback port this process bound and closed."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{port}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": "ns"}}],
        "current-context": "c",
    }
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "kubeconfig"
        path.write_text(yaml.safe_dump(config))
        yield str(path)


def check_cli(argv: list[str]) -> str:
    with _unreachable_kubeconfig() as kubeconfig:
        full = ["--kubeconfig", kubeconfig, *argv]
        err, out = io.StringIO(), io.StringIO()
        code: Any = 0
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            try:
                main(full)
            except SystemExit as exit_:
                code = exit_.code
    text = err.getvalue()
    if code in (0, None):
        return "ran (help)"
    if not isinstance(code, int):
        raise Violation("unclear", f"exit status {code!r}")
    if not text and "--json" in argv:
        try:
            answer = json.loads(out.getvalue())
        except ValueError:
            raise Violation("unclear", f"--json printed {out.getvalue()[:200]!r}") from None
        clear(str(answer.get("message") or ""))
        return f"refused: exit {code} (JSON {answer.get('error')})"
    clear(text)
    if not (text.startswith("usage:") or text.startswith("openblox:")):
        raise Violation("unclear", f"stderr does not say what failed: {text[:200]!r}")
    return f"refused: exit {code}" + (" (usage)" if text.startswith("usage:") else "")


CLI = Surface(
    "command-line arguments",
    "generated argv -> openblox main(), against an unreachable API server",
    CLI_ARGV,
    check_cli,
)

SURFACES = (PREVIEW_REQUESTS, CLIENT_ARGS, CLI)
