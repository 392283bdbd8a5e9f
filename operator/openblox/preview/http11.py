"""HTTP/1.1 message framing for the preview proxy (RFC 9112): heads read within bounds,
bodies copied by their own framing, and whatever could smuggle a second request refused.
No I/O but the streams it is handed.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

MAX_HEAD_BYTES = 64 * 1024
MAX_HEADERS = 128

# Hop-by-hop: about one connection, never forwarded (RFC 9110 7.6.1).
HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-connection", "te", "upgrade", "proxy-authorization"}
)


class HTTPError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Head:
    start: str
    headers: list[tuple[str, str]]

    def get(self, name: str) -> str | None:
        values = [v for k, v in self.headers if k.lower() == name]
        return ", ".join(values) if values else None

    def tokens(self, name: str) -> set[str]:
        return {t.strip().lower() for t in (self.get(name) or "").split(",") if t.strip()}


def read_head(stream: io.BufferedReader, bad: int = 400) -> Head | None:
    """A request or response head; None at a clean end of stream before it.

    `bad` is the status to answer a malformed one with: 400 for a client's request,
    502 for a sandbox's reply.
    """
    lines: list[bytes] = []
    total = 0
    while True:
        line = stream.readline(MAX_HEAD_BYTES + 1)
        if not line:
            if not lines:
                return None
            raise HTTPError(bad, "the head ended early")
        total += len(line)
        if total > MAX_HEAD_BYTES or len(lines) > MAX_HEADERS:
            raise HTTPError(431 if bad == 400 else bad, "the head is too large")
        if line in (b"\r\n", b"\n"):
            if not lines:
                continue  # a stray blank line between messages (RFC 9112 2.2)
            break
        lines.append(line)
    start = lines[0].decode("latin-1").rstrip("\r\n")
    headers = []
    for raw in lines[1:]:
        line = raw.rstrip(b"\r\n")
        name, colon, value = line.decode("latin-1").partition(":")
        # A bare CR or NUL could split a header differently further on (smuggling).
        if not colon or not name or name != name.strip() or b"\r" in line or b"\0" in line:
            raise HTTPError(bad, "a header line is malformed")
        headers.append((name, value.strip()))
    return Head(start, headers)


def body_framing(head: Head) -> tuple[str, int]:
    """("chunked", 0), ("length", n), or ("none", 0); refuses what could smuggle."""
    encodings = head.tokens("transfer-encoding")
    lengths = {v.strip() for k, v in head.headers if k.lower() == "content-length"}
    if encodings:
        if encodings != {"chunked"} or lengths:
            raise HTTPError(400, "unsupported or ambiguous message framing")
        return "chunked", 0
    if lengths:
        if len(lengths) != 1 or not next(iter(lengths)).isdigit():
            raise HTTPError(400, "bad Content-Length")
        return "length", int(next(iter(lengths)))
    return "none", 0


def copy_length(source: io.BufferedReader, write: Callable[[bytes], None], length: int) -> None:
    while length > 0:
        data = source.read1(min(length, 256 * 1024))
        if not data:
            raise ConnectionError("the body ended early")
        write(data)
        length -= len(data)


def copy_chunked(source: io.BufferedReader, write: Callable[[bytes], None]) -> None:
    """Forwards chunked framing as it is, reading it to know where the message ends."""
    while True:
        line = source.readline(1024)
        if not line.endswith(b"\n"):
            raise ConnectionError("bad chunk size line")
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError as error:
            raise ConnectionError("bad chunk size") from error
        write(line)
        if size == 0:
            while True:  # trailers, then the blank line
                trailer = source.readline(MAX_HEAD_BYTES)
                if not trailer:
                    raise ConnectionError("the trailers ended early")
                write(trailer)
                if trailer in (b"\r\n", b"\n"):
                    return
        copy_length(source, write, size + 2)


def copy_until_eof(source: io.BufferedReader, write: Callable[[bytes], None]) -> None:
    while data := source.read1(256 * 1024):
        write(data)


def json_response(status: int, reason: str, body: Mapping[str, Any], close: bool) -> bytes:
    payload = json.dumps(body).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\nCache-Control: no-store\r\n"
        + ("Connection: close\r\n" if close else "")
        + "\r\n"
    )
    return head.encode("latin-1") + payload


REASONS = {
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    431: "Request Header Fields Too Large",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}


def status_of(reply: Head) -> int:
    parts = reply.start.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise HTTPError(502, "the sandbox's server did not answer HTTP/1.x")
    return int(parts[1])


def response_head(
    reply: Head, status: int, extra: list[tuple[str, str]], keep_upgrade: bool = False
) -> bytes:
    parts = reply.start.split(" ", 2)
    reason = parts[2] if len(parts) > 2 else ""
    lines = [f"HTTP/1.1 {status} {reason}".rstrip()]
    for name, value in reply.headers:
        lower = name.lower()
        if lower in HOP_BY_HOP and not (keep_upgrade and lower in ("upgrade", "connection")):
            continue
        lines.append(f"{name}: {value}")
    lines += [f"{name}: {value}" for name, value in extra]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
