"""The request path against a server on loopback, blocking and asyncio: typed errors, a 401
retried with a fresh token, and watch events read line by line."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from openblox.transport import Api, Conflict, Credentials, Gone, NotFound, Session, Unauthorized
from openblox.transport.async_api import AsyncApi
from openblox.transport.rest import Call, Watch


class _Handler(BaseHTTPRequestHandler):
    seen: list[tuple[str, str, str]] = []  # noqa: RUF012 (one server per test)
    token_needed = "fresh"

    def log_message(self, *_: Any) -> None:
        pass

    def _answer(self, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self.seen.append(("GET", self.path, self.headers.get("Authorization", "")))
        if self.headers.get("Authorization") != f"Bearer {self.token_needed}":
            self._answer(401, {"kind": "Status", "code": 401, "reason": "Unauthorized"})
        elif self.path.startswith("/api/v1/namespaces/n/pods/absent"):
            self._answer(404, {"kind": "Status", "reason": "NotFound", "message": "absent"})
        elif self.path.startswith("/api/v1/namespaces/n/pods/p/log"):
            data = "first line\nlast line é\n".encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        elif self.path.startswith("/slow"):
            time.sleep(0.5)
            self._answer(200, {})
        elif "watch=1" in self.path:
            self.send_response(200)
            self.end_headers()
            if "allowWatchBookmarks=true" in self.path:
                bookmark = {"kind": "Pod", "metadata": {"resourceVersion": "9"}}
                self.wfile.write(json.dumps({"type": "BOOKMARK", "object": bookmark}).encode())
                self.wfile.write(b"\n")
            self.wfile.write(b'{"type":"ADDED","object":{"n":1}}\n\n')
            expired = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
            self.wfile.write(json.dumps({"type": "ERROR", "object": expired}).encode() + b"\n")
        else:
            self._answer(200, {"kind": "Pod", "metadata": {"name": "p"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        self.seen.append(("POST", self.path, self.rfile.read(length).decode()))
        self._answer(409, {"kind": "Status", "reason": "AlreadyExists", "message": "exists"})


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    _Handler.seen = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    token = tmp_path / "token"
    token.write_text("stale")
    yield f"http://127.0.0.1:{httpd.server_address[1]}", token
    httpd.shutdown()
    httpd.server_close()


def test_a_refusal_raises_its_type_with_the_status_message(server: tuple[str, Path]) -> None:
    address, token = server
    token.write_text("fresh")
    api = Api(Session(Credentials(server=address, token_file=str(token))))
    assert api.get("/api/v1/namespaces/n/pods/p")["metadata"]["name"] == "p"
    with pytest.raises(NotFound) as missing:
        api.get("/api/v1/namespaces/n/pods/absent")
    assert missing.value.message == "absent"
    with pytest.raises(Conflict) as exists:
        api.post("/api/v1/namespaces/n/pods", {"metadata": {"name": "p"}})
    assert exists.value.status_reason == "AlreadyExists"
    assert _Handler.seen[-1][2] == '{"metadata": {"name": "p"}}'


def test_a_401_reads_the_token_again_and_sends_once_more(server: tuple[str, Path]) -> None:
    address, token = server
    api = Api(Session(Credentials(server=address, token_file=str(token))))
    api.session.bearer_token()  # "stale" is now cached
    token.write_text("fresh")  # the kubelet rotated it
    assert api.get("/api/v1/namespaces/n/pods/p")["kind"] == "Pod"
    assert [auth for _, _, auth in _Handler.seen] == ["Bearer stale", "Bearer fresh"]


def test_a_static_token_refused_is_not_sent_again(server: tuple[str, Path]) -> None:
    address, _ = server
    api = Api(Session(Credentials(server=address, token="wrong")))
    with pytest.raises(Unauthorized):
        api.get("/api/v1/namespaces/n/pods/p")
    assert len(_Handler.seen) == 1


def test_a_watch_yields_events_then_raises_the_error_event(server: tuple[str, Path]) -> None:
    address, token = server
    token.write_text("fresh")
    api = Api(Session(Credentials(server=address, token_file=str(token))))
    events = api.watch("/api/v1/pods", resource_version="5", timeout_seconds=3)
    assert next(events) == {"type": "ADDED", "object": {"n": 1}}
    with pytest.raises(Gone, match="too old"):
        next(events)
    assert "resourceVersion=5" in _Handler.seen[0][1]


def test_a_watch_asked_for_bookmarks_yields_them(server: tuple[str, Path]) -> None:
    address, token = server
    token.write_text("fresh")
    api = Api(Session(Credentials(server=address, token_file=str(token))))
    events = api.watch("/api/v1/pods", resource_version="5", timeout_seconds=3, bookmarks=True)
    assert next(events)["type"] == "BOOKMARK"
    assert next(events)["type"] == "ADDED"
    assert "allowWatchBookmarks=true" in _Handler.seen[0][1]


def test_a_request_waits_no_longer_than_its_timeout(server: tuple[str, Path]) -> None:
    address, token = server
    token.write_text("fresh")
    api = Api(Session(Credentials(server=address, token_file=str(token))), request_timeout=0.1)
    assert api.guarded(contextlib.nullcontext).request_timeout == 0.1
    with pytest.raises(TimeoutError):
        api.get("/slow")


def test_a_text_answer_is_read_as_text_and_a_refusal_raises_its_type(
    server: tuple[str, Path],
) -> None:
    address, token = server
    token.write_text("fresh")
    api = Api(Session(Credentials(server=address, token_file=str(token))))
    log = api.text("/api/v1/namespaces/n/pods/p/log", container="c", tailLines=2)
    assert log == "first line\nlast line é\n"
    assert _Handler.seen[-1][1] == "/api/v1/namespaces/n/pods/p/log?container=c&tailLines=2"
    with pytest.raises(NotFound):
        api.text("/api/v1/namespaces/n/pods/absent/log")


def test_a_write_guard_refuses_before_anything_is_sent(server: tuple[str, Path]) -> None:
    address, _ = server

    @contextmanager
    def refuse() -> Iterator[None]:
        raise PermissionError("not the leader")
        yield

    api = Api(Session(Credentials(server=address, token="fresh"))).guarded(refuse)
    with pytest.raises(PermissionError):
        api.post("/api/v1/namespaces/n/pods", {})
    assert _Handler.seen == []
    assert api.get("/api/v1/namespaces/n/pods/p")["kind"] == "Pod"  # reads pass


# ------------------------------------------------------------------ the asyncio request path
# The same server, through `async_api.AsyncApi`: what to send and what an answer means are
# `rest`'s for both paths (`Endpoint`, `Exchange`), so the answers are the same.


def _async_send(api: AsyncApi, call: Call) -> dict[str, Any]:
    async def send() -> dict[str, Any]:
        try:
            return await api.send(call)
        finally:
            await api.aclose()

    return asyncio.run(send())


def test_the_asyncio_path_raises_the_same_typed_errors(server: tuple[str, Path]) -> None:
    address, token = server
    token.write_text("fresh")
    api = AsyncApi(Session(Credentials(server=address, token_file=str(token))))
    assert _async_send(api, Call("GET", "/api/v1/namespaces/n/pods/p"))["kind"] == "Pod"
    with pytest.raises(NotFound) as missing:
        _async_send(api, Call("GET", "/api/v1/namespaces/n/pods/absent"))
    assert missing.value.message == "absent"
    with pytest.raises(Conflict):
        _async_send(api, Call("POST", "/api/v1/namespaces/n/pods", {"metadata": {}}))
    assert _Handler.seen[-1][2] == '{"metadata": {}}'


def test_the_asyncio_path_sends_once_more_after_a_401_only_when_the_token_can_change(
    server: tuple[str, Path],
) -> None:
    address, token = server
    api = AsyncApi(Session(Credentials(server=address, token_file=str(token))))
    api.session.bearer_token()  # "stale" is now cached
    token.write_text("fresh")
    assert _async_send(api, Call("GET", "/api/v1/namespaces/n/pods/p"))["kind"] == "Pod"
    assert [auth for _, _, auth in _Handler.seen] == ["Bearer stale", "Bearer fresh"]
    static = AsyncApi(Session(Credentials(server=address, token="wrong")))
    with pytest.raises(Unauthorized):
        _async_send(static, Call("GET", "/api/v1/namespaces/n/pods/p"))
    assert len(_Handler.seen) == 3


def test_the_asyncio_watch_yields_events_then_raises_the_error_event(
    server: tuple[str, Path],
) -> None:
    address, token = server
    token.write_text("fresh")
    api = AsyncApi(Session(Credentials(server=address, token_file=str(token))))

    async def watch() -> list[dict[str, Any]]:
        seen: list[dict[str, Any]] = []
        try:
            async for event in api.watch(Watch("/api/v1/pods", "5", 3, {})):
                seen.append(event)
        finally:
            await api.aclose()
        return seen

    with pytest.raises(Gone, match="too old"):
        asyncio.run(watch())
    assert "resourceVersion=5" in _Handler.seen[0][1]
