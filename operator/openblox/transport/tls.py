"""A TLS connection that one thread may write while another reads.

An exec stream is full duplex: stdin goes up while stdout comes down, from two threads.
Python's `ssl.SSLSocket` cannot carry that: both directions call into one OpenSSL `SSL`
object, which is not safe to use from two threads at once. On this project's cluster
about one exec stream in forty that was written while read ended early, with neither
output nor the exec's Status (the preview proxy answered 502; the client lost a verdict).

Here the TLS state machine works on memory buffers (`ssl.MemoryBIO`) under a lock that
is held only while OpenSSL encrypts or decrypts, never while waiting on the network; the
TCP socket itself is read by one thread and written by another, which the kernel allows.
The object has the socket methods `websocket-client` calls on the socket it is given.
"""

from __future__ import annotations

import errno
import select
import socket
import ssl
import threading
from typing import Any
from urllib.parse import urlsplit

READ_BYTES = 256 * 1024


class DuplexTLSSocket:
    """A client TLS connection over TCP, safe for one reader and one writer at once."""

    def __init__(self, raw: socket.socket, context: ssl.SSLContext, server_hostname: str):
        self._raw = raw
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(
            self._incoming, self._outgoing, server_side=False, server_hostname=server_hostname
        )
        self._state = threading.Lock()  # the SSLObject and both buffers; never held on I/O
        self._sending = threading.Lock()  # one writer: records leave in the order made
        self._receiving = threading.Lock()  # one reader: bytes enter in the order read
        self._timeout: float | None = raw.gettimeout()
        self._handshake()
        # Sends block until the kernel takes the bytes; the read timeout is our own
        # (select before recv), so the two directions never share a socket timeout.
        raw.settimeout(None)

    @classmethod
    def connect(
        cls,
        url: str,
        context: ssl.SSLContext,
        timeout: float,
        server_hostname: str | None = None,
    ) -> DuplexTLSSocket:
        """A connection to the host of a wss:// or https:// URL; the certificate is checked
        for `server_hostname` (a kubeconfig's tls-server-name), else the URL's host."""
        parts = urlsplit(url)
        host = parts.hostname or ""
        raw = socket.create_connection((host, parts.port or 443), timeout=timeout)
        try:
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            return cls(raw, context, server_hostname or host)
        except BaseException:
            raw.close()
            raise

    def _handshake(self) -> None:
        while True:
            with self._state:
                try:
                    self._tls.do_handshake()
                    done = True
                except ssl.SSLWantReadError:
                    done = False
            self._send_records()
            if done:
                return
            data = self._raw.recv(READ_BYTES)
            if not data:
                raise ConnectionError("the server closed the connection during the TLS handshake")
            with self._state:
                self._incoming.write(data)

    # ------------------------------------------------------------- socket surface

    def send(self, data: bytes) -> int:
        with self._sending:
            with self._state:
                self._tls.write(data)
            self._send_records()
        return len(data)

    def sendall(self, data: bytes) -> None:
        self.send(data)

    def recv(self, bufsize: int) -> bytes:
        with self._receiving:
            while True:
                with self._state:
                    try:
                        return self._tls.read(bufsize)
                    except ssl.SSLWantReadError:
                        pass
                    except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                        # close_notify, or the peer closed TCP without one (a "ragged"
                        # end, which SSLSocket also reports as end of stream).
                        return b""
                self._flush_unprompted()
                self._wait_readable()
                data = self._raw.recv(READ_BYTES)
                with self._state:
                    if data:
                        self._incoming.write(data)
                    else:
                        self._incoming.write_eof()

    def _flush_unprompted(self) -> None:
        """Send what reading produced (a TLS 1.3 key update's answer), unless a writer
        is busy: it will send those bytes, in order, with its own."""
        if self._outgoing.pending and self._sending.acquire(blocking=False):
            try:
                self._send_records()
            finally:
                self._sending.release()

    def _send_records(self) -> None:
        """Sends what OpenSSL has made; the caller is the one writer (holds `_sending`,
        or is still in the handshake)."""
        with self._state:
            records = self._outgoing.read()
        if records:
            self._raw.sendall(records)

    def _wait_readable(self) -> None:
        if self._raw.fileno() == -1:
            raise OSError(errno.EBADF, "the connection is closed")
        if self._timeout is None:
            select.select([self._raw], [], [])
        elif not select.select([self._raw], [], [], self._timeout)[0]:
            raise TimeoutError("timed out")

    def settimeout(self, timeout: float | None) -> None:
        self._timeout = timeout

    def gettimeout(self) -> float | None:
        return self._timeout

    def setsockopt(self, *args: Any) -> None:
        self._raw.setsockopt(*args)

    def fileno(self) -> int:
        return self._raw.fileno()

    def shutdown(self, how: int) -> None:
        self._raw.shutdown(how)

    def close(self) -> None:
        self._raw.close()

    @property
    def _closed(self) -> bool:  # read by websocket-client before it closes a socket
        return self._raw.fileno() == -1
