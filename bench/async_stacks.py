"""One asyncio stack doing the exec websocket the async client needs, in a fresh interpreter.

`python -m bench.async_stacks STACK SETTINGS_JSON` imports the stack, then, from one event
loop, opens pods/exec (websocket subprotocol `v5.channel.k8s.io`, TLS with the client
certificate and/or bearer token from the kubeconfig) to run `true`: some calls one after
another, then a batch at once. It prints one JSON line: the import time, the RSS after the
imports, the peak RSS, each sequential call's time, the batch's wall time and how many
calls gave the wrong exit code or output. The candidates for ADR 0011.

`asyncio` is the floor: asyncio streams with a minimal RFC 6455 client written here (the
handshake, masked client frames, unfragmented server frames), what "no dependency" would
have to grow into.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any, Protocol

PROTOCOL = "v5.channel.k8s.io"


def _rss_kib(field: str = "VmRSS") -> int:
    """VmRSS (now) or VmHWM (the peak so far), in KiB."""
    with open("/proc/self/status") as status:  # noqa: PTH123 - a fresh, minimal process
        for line in status:
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    return 0


def _imports(stack: str) -> None:
    if stack == "aiohttp":
        import aiohttp  # noqa: F401
    elif stack == "httpx-ws":
        import httpx  # noqa: F401
        import httpx_ws  # noqa: F401
    elif stack == "websockets":
        import websockets.asyncio.client  # noqa: F401
    elif stack == "asyncio":
        import asyncio  # noqa: F401
        import base64  # noqa: F401
        import hashlib  # noqa: F401
        import ssl  # noqa: F401
    elif stack != "python":
        raise SystemExit(f"unknown stack {stack}")


def _url(settings: dict[str, Any], argv: list[str]) -> str:
    from urllib.parse import urlencode

    query = [("command", a) for a in argv] + [
        ("container", "sandbox"),
        ("stdout", "true"),
        ("stderr", "true"),
    ]
    host = settings["host"].replace("https://", "wss://", 1)
    path = f"/api/v1/namespaces/{settings['namespace']}/pods/{settings['pod']}/exec"
    return f"{host}{path}?{urlencode(query)}"


def _ssl(settings: dict[str, Any]) -> Any:
    import ssl

    context = ssl.create_default_context(cafile=settings.get("ca"))
    if settings.get("cert"):
        context.load_cert_chain(settings["cert"], settings.get("key"))
    return context


def _headers(settings: dict[str, Any]) -> dict[str, str]:
    token = settings.get("token")
    return {"Authorization": f"Bearer {token}"} if token else {}


def _outcome(frames: list[bytes]) -> tuple[int | None, bytes]:
    stdout, code = bytearray(), None
    for frame in frames:
        if frame[:1] == b"\x01":
            stdout += frame[1:]
        elif frame[:1] == b"\x03":
            status = json.loads(frame[1:] or b"{}")
            code = 0 if status.get("status") == "Success" else 1
    return code, bytes(stdout)


class AiohttpStack:
    def __init__(self, settings: dict[str, Any]) -> None:
        import aiohttp

        self.settings = settings
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=_ssl(settings), limit=0),
            headers=_headers(settings),
        )

    async def exec(self, argv: list[str]) -> tuple[int | None, bytes]:
        import aiohttp

        frames: list[bytes] = []
        async with self.session.ws_connect(_url(self.settings, argv), protocols=[PROTOCOL]) as ws:
            if ws.protocol != PROTOCOL:
                raise RuntimeError(f"no {PROTOCOL}: {ws.protocol}")
            async for message in ws:
                if message.type == aiohttp.WSMsgType.BINARY:
                    frames.append(message.data)
        return _outcome(frames)

    async def close(self) -> None:
        await self.session.close()


class HttpxWsStack:
    def __init__(self, settings: dict[str, Any]) -> None:
        import httpx

        self.settings = settings
        self.client = httpx.AsyncClient(
            verify=_ssl(settings),
            headers=_headers(settings),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=None),
        )

    async def exec(self, argv: list[str]) -> tuple[int | None, bytes]:
        from httpx_ws import AsyncWebSocketSession, WebSocketDisconnect, aconnect_ws

        frames: list[bytes] = []
        url = _url(self.settings, argv).replace("wss://", "https://", 1)
        # session_class is the default; named so the type checker knows the session's type.
        async with aconnect_ws(
            url, self.client, subprotocols=[PROTOCOL], session_class=AsyncWebSocketSession
        ) as ws:
            if ws.subprotocol != PROTOCOL:
                raise RuntimeError(f"no {PROTOCOL}: {ws.subprotocol}")
            try:
                while True:
                    frames.append(await ws.receive_bytes())
            except WebSocketDisconnect:
                pass
        return _outcome(frames)

    async def close(self) -> None:
        await self.client.aclose()


class WebsocketsStack:
    def __init__(self, settings: dict[str, Any]) -> None:
        self.settings = settings
        self.context = _ssl(settings)

    async def exec(self, argv: list[str]) -> tuple[int | None, bytes]:
        from websockets.asyncio.client import connect
        from websockets.typing import Subprotocol

        frames: list[bytes] = []
        async with connect(
            _url(self.settings, argv),
            ssl=self.context,
            subprotocols=[Subprotocol(PROTOCOL)],
            additional_headers=_headers(self.settings),
            max_size=None,
            compression=None,
        ) as ws:
            if ws.subprotocol != PROTOCOL:
                raise RuntimeError(f"no {PROTOCOL}: {ws.subprotocol}")
            async for message in ws:
                frames.append(bytes(message) if not isinstance(message, str) else b"")
        return _outcome(frames)

    async def close(self) -> None:
        return None


class AsyncioStack:
    """asyncio streams and a minimal websocket client: the no-dependency floor."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self.settings = settings
        self.context = _ssl(settings)

    async def exec(self, argv: list[str]) -> tuple[int | None, bytes]:
        import asyncio
        import base64
        import os
        from urllib.parse import urlsplit

        url = urlsplit(_url(self.settings, argv))
        reader, writer = await asyncio.open_connection(
            url.hostname, url.port or 443, ssl=self.context
        )
        try:
            key = base64.b64encode(os.urandom(16)).decode()
            extra = "".join(f"{k}: {v}\r\n" for k, v in _headers(self.settings).items())
            writer.write(
                (
                    f"GET {url.path}?{url.query} HTTP/1.1\r\nHost: {url.netloc}\r\n"
                    "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                    f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                    f"Sec-WebSocket-Protocol: {PROTOCOL}\r\n{extra}\r\n"
                ).encode()
            )
            head = await reader.readuntil(b"\r\n\r\n")
            if not head.startswith(b"HTTP/1.1 101") or PROTOCOL.encode() not in head:
                raise RuntimeError(f"refused: {head[:200]!r}")
            frames = []
            while True:
                first, second = await reader.readexactly(2)
                length = second & 0x7F
                if length == 126:
                    length = int.from_bytes(await reader.readexactly(2), "big")
                elif length == 127:
                    length = int.from_bytes(await reader.readexactly(8), "big")
                payload = await reader.readexactly(length)
                opcode = first & 0x0F
                if opcode == 0x8:
                    break
                if opcode == 0x2:
                    frames.append(payload)
            return _outcome(frames)
        finally:
            writer.close()

    async def close(self) -> None:
        return None


class Stack(Protocol):
    """What each candidate offers the measurement: one exec, and a close at the end."""

    async def exec(self, argv: list[str]) -> tuple[int | None, bytes]: ...

    async def close(self) -> None: ...


STACKS: dict[str, Callable[[dict[str, Any]], Stack]] = {
    "aiohttp": AiohttpStack,
    "httpx-ws": HttpxWsStack,
    "websockets": WebsocketsStack,
    "asyncio": AsyncioStack,
}


async def _measure(stack: str, settings: dict[str, Any]) -> dict[str, Any]:
    import asyncio

    runner = STACKS[stack](settings)
    try:
        await runner.exec(["true"])  # warm: TLS session, the pod's exec path
        sequential, wrong = [], 0
        for _ in range(int(settings["sequential"])):
            started = time.perf_counter()
            code, out = await runner.exec(["printf", "42"])
            sequential.append((time.perf_counter() - started) * 1000)
            wrong += int(code != 0 or out != b"42")
        started = time.perf_counter()
        batch = await asyncio.gather(
            *(runner.exec(["true"]) for _ in range(int(settings["batch"]))),
            return_exceptions=True,
        )
        batch_ms = (time.perf_counter() - started) * 1000
        batch_wrong = sum(1 for r in batch if isinstance(r, BaseException) or r[0] != 0)
        errors = sorted({repr(r)[:160] for r in batch if isinstance(r, BaseException)})
    finally:
        await runner.close()
    return {
        "sequential_ms": sequential,
        "wrong": wrong,
        "batch_ms": batch_ms,
        "batch_wrong": batch_wrong,
        "batch_errors": errors[:3],
    }


def main() -> None:
    stack, settings = sys.argv[1], json.loads(sys.argv[2])
    rss_start = _rss_kib()
    started = time.perf_counter()
    _imports(stack)
    import_ms = (time.perf_counter() - started) * 1000
    rss_import = _rss_kib()
    result: dict[str, Any] = {
        "import_ms": import_ms,
        "rss_start": rss_start,
        "rss_import": rss_import,
    }
    if settings.get("pod") and stack != "python":
        import asyncio

        result.update(asyncio.run(_measure(stack, settings)))
    result["rss_peak"] = _rss_kib("VmHWM")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
