"""The chaos section's traffic, as a user makes it: claims at a steady rate, each Sandbox
running a few commands and writing a file it reads back, then deleted; keepers that live
through the whole run and check, every few seconds, that what they wrote is still there
while their pod lives; and Sandboxes with a short maxAgeSeconds, left for the reaper.

Every call goes through openblox's own client, so a failure is what a user would get.
No thread of it dies on an error: each failure is recorded as an attempt, with its reason.
"""

from __future__ import annotations

import functools
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.chaos_records import Attempt, Ledger, classify
from bench.cluster_side import Kube, pods_path, sandboxes_path
from openblox.client import Client
from openblox.client.errors import FileOperationError
from openblox.names import GROUP, KIND, VERSION
from openblox.transport import NotFound

PROFILE = "code-exec"
CLAIM_TIMEOUT = 120.0
EXEC_TIMEOUT = 30.0
EXECS_PER_CLAIM = 3
# Cycles at once, at most: past it the node is saturated, and a claim not started is
# counted as skipped (with when), not queued: a queue would only move the wait elsewhere.
MAX_IN_FLIGHT = 8
KEEPERS = 2
KEEPER_TICK = 5.0
REAPED_MAX_AGE = 45
REAPED_EVERY = 40.0
DELETE_PATIENCE = 90.0
LOOKUP_TIMEOUT = 10.0


@dataclass
class Cycle:
    started: float
    finished: float = 0.0
    whole: bool = False


@dataclass
class Keeper:
    name: str
    pod_uid: str = ""
    written: list[tuple[str, str]] = field(default_factory=list)
    """(path, what was written) on the current pod."""
    ticks: int = 0


class Load:
    """The traffic, on threads; `stop()` ends it and waits for what is in flight."""

    def __init__(
        self, kubeconfig: str, namespaces: dict[str, str], t0: float, log: Callable[[str], None]
    ) -> None:
        self.client = Client(namespaces["cold"], kubeconfig=kubeconfig)
        self.kube = Kube(kubeconfig, request_timeout=LOOKUP_TIMEOUT)
        self.namespaces = namespaces
        self.t0 = t0
        self.log = log
        self.attempts: list[Attempt] = []
        self.cycles: list[Cycle] = []
        self.ledger = Ledger()
        self.lost: list[str] = []
        """Files gone or read back different while the pod that holds them lived."""
        self.lost_with_pod = 0
        """Files that died with their pod (replaced): expected, and counted."""
        self.unverified = 0
        """Files that read back wrong when which pod held them could not be read."""
        self.skipped: list[float] = []
        """When a claim was due and MAX_IN_FLIGHT cycles were running."""
        self.undeleted: list[str] = []
        self.reaped_names: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._dispatcher: threading.Thread | None = None
        self._threads: list[threading.Thread] = []
        self._in_flight = 0

    def now(self) -> float:
        return time.monotonic() - self.t0

    def _record(self, attempt: Attempt) -> None:
        with self._lock:
            self.attempts.append(attempt)

    def _failed(self, kind: str, started: float, error: BaseException, **extra: Any) -> None:
        reason, explained = classify(error)
        self._record(
            Attempt(kind, started, self.now() - started, False, reason, explained, **extra)
        )

    def _timed(self, kind: str, call: Callable[[], Any]) -> Any:
        started = self.now()
        try:
            value = call()
        except Exception as error:
            self._failed(kind, started, error)
            raise
        self._record(Attempt(kind, started, self.now() - started, True))
        return value

    def _spawn(self, name: str, target: Callable[..., None], *args: Any) -> threading.Thread:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        with self._lock:
            self._threads.append(thread)
        thread.start()
        return thread

    # ------------------------------------------------------------------ claims

    def start(self, rate: float) -> None:
        self._dispatcher = self._spawn("dispatch", self._dispatch, rate)
        for index in range(KEEPERS):
            self._spawn(f"keeper-{index}", self._keep, Keeper(f"keeper-{index}"))
        self._spawn("reaper-feed", self._leave_for_reaper)

    def _dispatch(self, rate: float) -> None:
        index = 0
        next_at = time.monotonic()
        while not self._stop.is_set():
            with self._lock:
                full = self._in_flight >= MAX_IN_FLIGHT
                if not full:
                    self._in_flight += 1
            if full:
                self.skipped.append(self.now())
            else:
                namespace = self.namespaces["pool" if index % 2 == 0 else "cold"]
                self._spawn(f"cycle c{index:04d}", self._cycle, index, namespace)
            index += 1
            next_at += 1.0 / rate
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def _cycle(self, index: int, namespace: str) -> None:
        cycle = Cycle(self.now())
        name = f"c{index:04d}"
        try:
            cycle.whole = self._claim_and_use(name, namespace)
        finally:
            try:
                cycle.finished = self.now()
                with self._lock:
                    self.cycles.append(cycle)
                self._delete(name, namespace)
            finally:
                with self._lock:
                    self._in_flight -= 1

    def _claim_and_use(self, name: str, namespace: str) -> bool:
        started = self.now()
        cold = namespace == self.namespaces["cold"]
        try:
            sandbox = self.client.create(
                PROFILE, name=name, namespace=namespace, timeout=CLAIM_TIMEOUT
            )
            pod = sandbox.pod
        except Exception as error:
            self._failed("claim", started, error, cold_namespace=cold)
            return False
        took = self.now() - started
        self._record(Attempt("claim", started, took, True, warm="." in pod, cold_namespace=cold))
        pod_uid = self._pod_uid(namespace, pod)
        if pod_uid:
            self.ledger.claimed(pod_uid, f"{namespace}/{name}")
        whole = True
        for _ in range(EXECS_PER_CLAIM):
            whole = self._exec_42(sandbox) and whole
        path, token = "/workspace/chaos.txt", secrets.token_hex(16)
        try:
            self._timed("file", functools.partial(sandbox.write_file, path, token))
        except Exception:
            return False
        where = (namespace, pod, pod_uid)
        return self._read_back(sandbox, where, (path, token), on_loss=lambda: None) and whole

    def _exec_42(self, sandbox: Any) -> bool:
        started = self.now()
        try:
            result = sandbox.exec(["python3", "-c", "print(6*7)"], timeout=EXEC_TIMEOUT)
        except Exception as error:
            self._failed("exec", started, error)
            return False
        if result.timed_out:
            # The profile's verdict, named by the result: the command outlived its timeout.
            reason = f"timed out after {EXEC_TIMEOUT:.0f} s"
            self._record(Attempt("exec", started, self.now() - started, False, reason, True))
            return False
        if result.exit_code != 0 or result.stdout != b"42\n":
            # The command ran and answered wrongly: nothing in the client names why.
            reason = f"wrong answer: exit {result.exit_code}, {result.stdout[:40]!r}"
            self._record(Attempt("exec", started, self.now() - started, False, reason, False))
            return False
        self._record(Attempt("exec", started, self.now() - started, True))
        return True

    def _read_back(
        self,
        sandbox: Any,
        where: tuple[str, str, str],
        written: tuple[str, str],
        *,
        on_loss: Callable[[], None],
    ) -> bool:
        """Read a file written earlier; True if it holds what was written. A file gone or
        different is lost if the pod that held it (`where`: namespace, pod, its uid) still
        lives, else it died with its pod (`on_loss` then forgets the pod's files)."""
        namespace, pod, pod_uid = where
        path, token = written
        try:
            back: bytes | None = self._timed("file", functools.partial(sandbox.read_file, path))
        except FileOperationError:
            back = None  # not there (or unreadable): lost, if its pod still lives
        except Exception:
            return False  # the call itself failed: recorded, and says nothing of the file
        if back is not None and back.decode(errors="replace") == token:
            return True
        seen = "nothing" if back is None else repr(back[:40])
        now_uid = self._pod_uid(namespace, pod)
        if not pod_uid or not now_uid:
            with self._lock:
                self.unverified += 1
        elif now_uid == pod_uid:
            with self._lock:
                self.lost.append(f"{namespace}/{sandbox.name}:{path} read back {seen}")
        else:
            with self._lock:
                self.lost_with_pod += 1
            on_loss()
        return False

    def _pod_uid(self, namespace: str, pod: str) -> str:
        """The live pod's uid, or "" when it is going or cannot be read now."""
        try:
            body = self.kube.get(f"{pods_path(namespace)}/{pod}")
        except Exception:  # gone, or the API server restarting: cannot be told now
            return ""
        if body["metadata"].get("deletionTimestamp"):
            return ""
        return str(body["metadata"]["uid"])

    def _delete(self, name: str, namespace: str) -> None:
        deadline = time.monotonic() + DELETE_PATIENCE
        while time.monotonic() < deadline:
            try:
                self.kube.request("DELETE", f"{sandboxes_path(namespace)}/{name}")
                return
            except NotFound:
                return
            except Exception:  # the API server restarting: try again
                time.sleep(2.0)
        with self._lock:
            self.undeleted.append(f"{namespace}/{name}")

    # ------------------------------------------------------------------ keepers

    def _keep(self, keeper: Keeper) -> None:
        """One Sandbox for the whole run: every tick a command, a new file, and a file
        written earlier on the same pod read back."""
        sandbox = None
        while not self._stop.wait(KEEPER_TICK if sandbox is not None else 1.0):
            started = self.now()
            try:
                if sandbox is None:
                    sandbox = self.client.create(
                        PROFILE,
                        name=keeper.name,
                        namespace=self.namespaces["keep"],
                        timeout=CLAIM_TIMEOUT,
                    )
                sandbox.refresh()
                pod = sandbox.pod
            except Exception as error:
                self._failed("keeper", started, error)
                continue
            self._keeper_tick(sandbox, pod, keeper)

    def _keeper_tick(self, sandbox: Any, pod: str, keeper: Keeper) -> None:
        namespace = self.namespaces["keep"]
        uid = self._pod_uid(namespace, pod)
        if not uid:
            return  # which pod holds the files cannot be told this tick
        if uid != keeper.pod_uid:
            with self._lock:
                self.lost_with_pod += len(keeper.written)
            keeper.pod_uid, keeper.written = uid, []
        self._exec_42(sandbox)
        keeper.ticks += 1
        path, token = f"/workspace/k{keeper.ticks}.txt", secrets.token_hex(16)
        try:
            self._timed("file", functools.partial(sandbox.write_file, path, token))
        except Exception:
            return
        keeper.written.append((path, token))
        earlier = keeper.written[keeper.ticks % len(keeper.written)]

        def forget() -> None:
            keeper.written = []

        self._read_back(sandbox, (namespace, pod, uid), earlier, on_loss=forget)

    # ------------------------------------------------------------------ reaper

    def _leave_for_reaper(self) -> None:
        """A Sandbox with a short maxAgeSeconds now and then, never deleted by us."""
        index = 0
        while not self._stop.is_set():
            name = f"r{index:03d}"
            body = {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": KIND,
                "metadata": {"name": name},
                "spec": {"profile": PROFILE, "maxAgeSeconds": REAPED_MAX_AGE},
            }
            try:
                self.kube.request("POST", sandboxes_path(self.namespaces["reaped"]), body)
                self.reaped_names.append(name)
            except Exception as error:  # the API server restarting: the next one will do
                self.log(f"chaos: could not leave {name} for the reaper: {error}")
            index += 1
            self._stop.wait(REAPED_EVERY)

    # ------------------------------------------------------------------ end

    def stop(self, patience: float) -> list[str]:
        """Stop starting anything; wait up to `patience` s for what runs. Returns the
        threads still running then (each one a call that has not come back)."""
        self._stop.set()
        deadline = time.monotonic() + patience
        if self._dispatcher is not None:
            self._dispatcher.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return [t.name for t in threads if t.is_alive()]
