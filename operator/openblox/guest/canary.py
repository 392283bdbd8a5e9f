"""The suite's canaries, run in ordinary pods it starts: `python3 -c <this file> ROLE [ARGS]`.

- ``net PORTS`` / ``metadata PORTS``: TCP servers (answering HTTP) and UDP/TCP DNS
  servers (answering with 192.0.2.53) on the given ports, e.g. ``tcp:80,udp:53,tcp:53``.
  Every connection and datagram is appended to /tmp/hits.jsonl with the peer and the
  first bytes, so the suite can tell whether a probe from a sandbox got through.
- ``host TOKEN KEY``: a marker in the host's PID and IPC namespaces (run with hostPID and
  hostIPC): this process's command line carries TOKEN, and it holds a SysV shared-memory
  segment with key KEY. A sandbox that sees either shares the host's namespace.

Standard library only.
"""
# Sent as source text; plain file calls, no pathlib:
# ruff: noqa: PTH123

from __future__ import annotations

import contextlib
import ctypes
import json
import signal
import socket
import struct
import sys
import threading
import time
from types import FrameType

HITS = "/tmp/hits.jsonl"
LOCK = threading.Lock()
ANSWER = bytes([192, 0, 2, 53])


def record(proto: str, port: int, peer: str, data: bytes) -> None:
    line = json.dumps(
        {
            "t": time.time(),
            "proto": proto,
            "port": port,
            "peer": peer,
            "data": data[:200].decode("latin-1"),
        }
    )
    with LOCK, open(HITS, "a") as handle:
        handle.write(line + "\n")


def dns_answer(query: bytes) -> bytes:
    """A minimal answer: the question echoed and one A record."""
    if len(query) < 12:
        return b""
    end = 12
    while end < len(query) and query[end] != 0:
        end += query[end] + 1
    question = query[12 : end + 5]
    header = query[:2] + struct.pack(">HHHHH", 0x8180, 1, 1, 0, 0)
    answer = b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 60, 4) + ANSWER
    return header + question + answer


def serve_tcp(port: int) -> None:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("0.0.0.0", port))
    server.listen(64)
    while True:
        peer, address = server.accept()
        threading.Thread(target=answer_tcp, args=(peer, address, port), daemon=True).start()


def answer_tcp(peer: socket.socket, address: tuple[str, int], port: int) -> None:
    with peer:
        peer.settimeout(3)
        data = b""
        with contextlib.suppress(OSError):
            data = peer.recv(4096)
        record("tcp", port, address[0], data)
        with contextlib.suppress(OSError):
            if port == 53 and len(data) > 2:
                reply = dns_answer(data[2:])
                peer.sendall(struct.pack(">H", len(reply)) + reply)
            else:
                body = b"openblox-canary " + sys.argv[1].encode() + b"\n"
                if data.startswith(b"GET /latest"):
                    body = b'{"AccessKeyId": "CANARY", "SecretAccessKey": "not-a-secret"}\n'
                peer.sendall(
                    b"HTTP/1.0 200 OK\r\nContent-Length: "
                    + str(len(body)).encode()
                    + b"\r\n\r\n"
                    + body
                )


def serve_udp(port: int) -> None:
    server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    server.bind(("0.0.0.0", port))
    while True:
        data, address = server.recvfrom(4096)
        record("udp", port, address[0], data)
        with contextlib.suppress(OSError):
            server.sendto(dns_answer(data), address)


def listen(spec: str) -> None:
    open(HITS, "a").close()
    for item in spec.split(","):
        proto, _, port = item.partition(":")
        target = serve_tcp if proto == "tcp" else serve_udp
        threading.Thread(target=target, args=(int(port),), daemon=True).start()
    sys.stdout.write(f"listening on {spec}\n")
    sys.stdout.flush()
    while True:
        time.sleep(3600)


def host(token: str, key: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    segment = libc.shmget(key, 4096, 0o1000 | 0o644)  # IPC_CREAT
    sys.stdout.write(f"marker {token} shm key {key} id {segment}\n")
    sys.stdout.flush()
    if segment >= 0:
        # Ready only once the segment exists: BND-004 looks for it the moment it is.
        open(HITS, "a").close()

    def stop(_signum: int, _frame: FrameType | None) -> None:
        if segment >= 0:
            libc.shmctl(segment, 0, None)  # IPC_RMID: leave nothing in the host's IPC
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while True:
        time.sleep(3600)


def main() -> None:
    role = sys.argv[1]
    if role == "host":
        host(sys.argv[2], int(sys.argv[3]))
    else:  # net, metadata: the role names itself in every answer
        listen(sys.argv[2])


if __name__ == "__main__":
    main()
