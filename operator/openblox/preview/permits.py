"""How long a client connection may go on relaying: until the link it carries expires, or
until the key that signed the link leaves the key ring, whichever comes first.

A token is checked when its request arrives, but a conversation can outlive that moment
by hours: a websocket, an event stream, a chunked body that never ends, a reply the app
holds back, a body the client trickles in. So each connection holds a `Permit`, the token
of its request in flight (or of its last one, while it idles), and one `PermitWatch`
thread for the whole proxy verifies every permit's token again, exactly as a new
request's is verified, at each permit's expiry and every TICK_SECONDS besides (a key
removed from the ring is seen within a tick). A permit that no longer verifies is cut:

- nothing said yet on its request: the client's side is shut for reading and the tunnel
  cut, and the conversation answers 403 with the reason a new request would get;
- a reply under way (a body, a stream) or an upgraded connection (a websocket): the
  client connection is shut both ways and the tunnel cut; that late, closing is the
  only thing left to say;
- idle between requests: only the tunnel is cut; the next request is checked on its own.

A cut only shuts sockets, which waits on nobody, so a stuck peer never delays the watch.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import math
import socket
import threading
import time
from collections.abc import Callable, Mapping

from prometheus_client import Counter

from openblox.preview.relay import Tunnel
from openblox.preview.tokens import Grant, TokenError, verify

log = logging.getLogger(__name__)

TICK_SECONDS = 0.5
CUTS = Counter(
    "openblox_preview_cuts",
    "Connections cut because their link expired or its key left the ring, by reason and phase",
    ["reason", "phase"],
)
# What each refusal reason means for a link that verified when its request came.
WHY = {
    "expired": "the link expired",
    "unknown-key": "the key that signed the link left the key ring",
    "forged": "the key that signed the link was replaced",
    # Only once the proxy's clock has gone back: the expiry is then too far ahead.
    "malformed": "the link's expiry is further ahead than the proxy allows",
}

Keys = Callable[[], Mapping[str, bytes]]
Clock = Callable[[], float]


class Phase(enum.Enum):
    IDLE = "an idle connection's tunnel"
    AWAITING = "a request awaiting its reply"
    REPLYING = "a reply under way"
    PIPED = "an upgraded connection"


class Cut(Exception):
    """The connection's permit was cut; `reason` is the token's refusal reason."""

    def __init__(self, reason: str) -> None:
        super().__init__(WHY.get(reason, reason))
        self.reason = reason


class Permit:
    """What lets one client connection relay now. Its lock is never held during I/O."""

    def __init__(
        self, sock: socket.socket, keys: Keys, clock: Clock, wake_by: Callable[[float], None]
    ) -> None:
        self._sock = sock
        self._keys = keys
        self._clock = clock
        self._wake_by = wake_by
        self._lock = threading.Lock()
        self._token = ""
        self._grant: Grant | None = None
        self._phase = Phase.IDLE
        self._tunnel: Tunnel | None = None
        self._cut: str | None = None
        self._released = False

    def admit(self, token: str) -> Grant:
        """Verifies a new request's token (TokenError if refused); from now on it bounds
        the connection. Cut if the connection was already cut: it is ending."""
        grant = verify(token, self._keys(), self._clock())
        with self._lock:
            if self._cut is None:
                self._token, self._grant, self._phase = token, grant, Phase.AWAITING
        self.ensure()
        self._wake_by(grant.expires)
        return grant

    def replying(self, upgraded: bool = False) -> None:
        """Called before the first byte of a reply (or of an upgraded connection) reaches
        the client; raises Cut if the token no longer verifies (checked now, not at the
        watch's next wake)."""
        keys, now = self._keys(), self._clock()
        with self._lock:
            why = self._check(keys, now)
            if self._cut is None:
                self._phase = Phase.PIPED if upgraded else Phase.REPLYING
        self._tell(why)
        self.ensure()

    def idle(self) -> None:
        """The reply is complete; the connection waits for its next request."""
        with self._lock:
            self._phase = Phase.IDLE

    def attach(self, tunnel: Tunnel) -> None:
        """The tunnel to cut with the permit; raises Cut if it already was."""
        with self._lock:
            self._tunnel = tunnel
        self.ensure()

    def detach(self) -> None:
        """The conversation closes its tunnel itself."""
        with self._lock:
            self._tunnel = None

    def ensure(self) -> None:
        """Raises Cut if the permit was cut, so nothing more is relayed under it."""
        with self._lock:
            reason = self._cut
        if reason is not None:
            raise Cut(reason)

    def refusal(self) -> str | None:
        """The reason to answer 403 with: the permit was cut before its reply began."""
        with self._lock:
            return self._cut if self._phase is Phase.AWAITING else None

    @property
    def cut(self) -> bool:
        with self._lock:
            return self._cut is not None

    @property
    def expires(self) -> float:
        """When the watch must look again at the latest (infinity: nothing to watch)."""
        with self._lock:
            if self._grant is None or not self._token or self._cut or self._released:
                return math.inf
            return float(self._grant.expires)

    def check(self, keys: Mapping[str, bytes], now: float) -> None:
        with self._lock:
            why = self._check(keys, now)
        self._tell(why)

    def release(self) -> None:
        """The conversation is over: the watch leaves its sockets alone from now on, so
        its owner may close them (a descriptor closed may be reused by another)."""
        with self._lock:
            self._released = True
            self._tunnel = None

    def _check(self, keys: Mapping[str, bytes], now: float) -> str | None:
        """Under the lock: cuts the permit if its token no longer verifies; the log line
        saying why, to be written once the lock is let go."""
        if self._released or self._cut is not None or not self._token:
            return None
        try:
            verify(self._token, keys, now)
        except TokenError as error:
            return self._cut_now(error.reason)
        return None

    def _cut_now(self, reason: str) -> str:
        grant, phase = self._grant, self._phase
        assert grant is not None
        if self._tunnel is not None:
            self._tunnel.abort()
        if phase is Phase.IDLE:
            # Nothing is relayed between requests; the next one is verified on its own.
            self._token, self._tunnel = "", None
        else:
            self._cut = reason
            how = socket.SHUT_RD if phase is Phase.AWAITING else socket.SHUT_RDWR
            with contextlib.suppress(OSError):
                self._sock.shutdown(how)
        CUTS.labels(reason, phase.name.lower()).inc()
        where = f"{grant.namespace}/{grant.sandbox} port {grant.port}"
        return f"cut {phase.value} to {where}: {WHY.get(reason, reason)}"

    def _tell(self, why: str | None) -> None:
        if why is not None:
            log.info("%s", why)


class PermitWatch:
    """The one thread that cuts every connection whose link no longer verifies."""

    def __init__(self, keys: Keys, clock: Clock = time.time, tick: float = TICK_SECONDS):
        self._keys = keys
        self._clock = clock
        self._tick = tick
        self._permits: set[Permit] = set()
        self._cond = threading.Condition()
        self._next = -math.inf  # when to sweep next; lowered by each new expiry
        self._stopped = False
        self._thread = threading.Thread(target=self._run, daemon=True, name="permit-watch")
        self._thread.start()

    def permit(self, sock: socket.socket) -> Permit:
        permit = Permit(sock, self._keys, self._clock, self._wake_by)
        with self._cond:
            self._permits.add(permit)
        return permit

    def release(self, permit: Permit) -> None:
        permit.release()
        with self._cond:
            self._permits.discard(permit)

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        self._thread.join(5)

    def _wake_by(self, when: float) -> None:
        with self._cond:
            if when < self._next:
                self._next = when
                self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and self._clock() < self._next:
                    # Never longer than a tick: the wall clock may jump meanwhile.
                    self._cond.wait(min(self._next - self._clock(), self._tick))
                if self._stopped:
                    return
                self._next = self._clock() + self._tick
                permits = list(self._permits)
            soonest = math.inf
            try:
                keys, now = self._keys(), self._clock()
                for permit in permits:
                    permit.check(keys, now)
                    soonest = min(soonest, permit.expires)
            except Exception:  # one bad sweep must not end the watch for everyone
                log.exception("checking the open preview connections failed")
            self._wake_by(soonest)
