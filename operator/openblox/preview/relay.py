"""A byte pipe to 127.0.0.1:<port> inside a sandbox, carried by one pods/exec stream.

Sandbox pods have no network, so the proxy never connects to them. It execs a small
stdlib-only relay (guest/relay_agent.py) in the sandbox's container; the relay connects
to the loopback port and copies bytes: exec stdin -> socket, socket -> exec stdout. The proxy
sees a `Tunnel`: a readable raw stream (the server's bytes) with `send` for the other way.
End of stdin ends the relay, so closing the tunnel ends the process in the sandbox.
"""

from __future__ import annotations

import contextlib
import io
import threading
import time
from collections import deque
from collections.abc import Callable

from openblox.guest import RELAY_AGENT, source
from openblox.transport import ExecOutput, ExecSocket, ExecStreamError

# Run as `python3 -I -S -c AGENT PORT` (guest/relay_agent.py). Exit 3: nothing listens on
# the port.
AGENT = source(RELAY_AGENT)
AGENT_EXIT_REFUSED = 3  # guest/relay_agent.py's EXIT_REFUSED
# Server bytes buffered ahead of a slow reader before the tunnel stops reading the exec
# stream (and so pushes back on the sandbox).
BUFFER_BYTES = 4 << 20
MAX_TUNNEL_SECONDS = 6 * 3600


def agent_argv(port: int) -> list[str]:
    # -I -S: nothing is imported from /workspace (the exec's working directory, which the
    # guest writes) or from site-packages; the relay runs only its own code.
    return ["python3", "-I", "-S", "-c", AGENT, str(port)]


class Tunnel(io.RawIOBase):
    """One exec-backed connection to a loopback port in a sandbox."""

    def __init__(self, socket: ExecSocket, on_close: Callable[[], None] | None = None) -> None:
        super().__init__()
        self._socket = socket
        self._on_close = on_close
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._cond = threading.Condition()
        self._eof = False
        # Stdout goes to the caller through `_chunks`; what the relay said on stderr and
        # the exec's Status are kept for `diagnostics` (a few KiB of stderr tell why).
        self._output = ExecOutput(keep_stdout=0, keep_stderr=4096)
        self._broken = ""
        # `abort` may come from another thread while the owner closes: this lock orders
        # them, so the stream is never shut after its socket was closed (by then the
        # descriptor may belong to another connection).
        self._ending = threading.Lock()
        self._closing = self._socket_closing = self._aborted = False
        self.received = 0
        self.read_timeout = 300.0
        self._reader = threading.Thread(target=self._pump, daemon=True, name="tunnel-reader")
        self._reader.start()

    def _pump(self) -> None:
        try:
            for frame in self._socket.frames(time.monotonic() + MAX_TUNNEL_SECONDS):
                data = self._output.feed(frame)
                if data:
                    with self._cond:
                        while self._buffered >= BUFFER_BYTES and not self._stopped:
                            self._cond.wait(1.0)
                        if self._stopped:
                            continue  # cut or closed: nobody may read these bytes now
                        self._chunks.append(data)
                        self._buffered += len(data)
                        self.received += len(data)
                        self._cond.notify_all()
        except (ExecStreamError, TimeoutError) as error:
            self._broken = str(error) or type(error).__name__
        finally:
            with self._cond:
                self._eof = True
                self._cond.notify_all()

    @property
    def _stopped(self) -> bool:
        return self._aborted or self.closed

    @property
    def at_eof(self) -> bool:
        """True once nothing more will come: the stream ended and was read, or was cut."""
        with self._cond:
            return self._aborted or (self._eof and not self._chunks)

    def diagnostics(self) -> str:
        """What the relay said on stderr, else how its exec ended (status or broken stream)."""
        said = self._output.stderr.decode("utf-8", "replace").strip()
        if said:
            return said
        if self._broken:
            return f"the exec stream broke: {self._broken}"
        return self._output.status.decode("utf-8", "replace").strip()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        deadline = time.monotonic() + self.read_timeout
        with self._cond:
            while not self._chunks:
                if self._eof or self._stopped:
                    return 0
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError("the sandbox's server sent nothing in time")
                self._cond.wait(remaining)
            chunk = self._chunks.popleft()
            size = min(len(buffer), len(chunk))
            buffer[:size] = chunk[:size]
            if size < len(chunk):
                self._chunks.appendleft(chunk[size:])
            self._buffered -= size
            self._cond.notify_all()
            return size

    def send(self, data: bytes) -> None:
        if not data:
            return
        if self._aborted:
            raise ExecStreamError("the tunnel was cut")
        try:
            self._socket.send_stdin(data)
        except ExecStreamError:
            raise
        except Exception as error:  # the websocket library's own errors: a broken stream
            raise ExecStreamError(f"the exec stream broke: {error}") from error

    def abort(self) -> None:
        """Cuts the tunnel now, from any thread, waiting on nothing: a read returns end of
        stream, a send fails, and bytes the sandbox sent that were not read yet are
        dropped. Ending the exec stream ends the relay in the sandbox. The owner still
        calls `close`."""
        with self._ending:
            if self._socket_closing:
                return
            self._aborted = True
            self._socket.abort()
        with self._cond:
            self._chunks.clear()
            self._buffered = 0
            self._cond.notify_all()

    def close(self) -> None:
        with self._ending:
            if self._closing:
                return
            self._closing = True
        super().close()
        with self._cond:
            self._cond.notify_all()
        # The stream may already be gone; closing it is all that is left to do.
        with contextlib.suppress(Exception):
            self._socket.close_stdin()
        with self._ending:
            self._socket_closing = True
        self._socket.close()
        if self._on_close is not None:
            self._on_close()
