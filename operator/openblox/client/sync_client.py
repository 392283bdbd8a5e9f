"""`openblox.Client`: create sandboxes from profiles and run code in them, through the API.

Everything goes through the Kubernetes API server: Sandbox objects for lifecycle, and
`pods/exec` for commands and files. Sandbox pods have no network, so nothing here
reaches a pod directly. This is the blocking shell: every call is a plan of
`client_steps`, `sandbox_steps` or `files` (the decisions, written once for this client
and `AsyncClient`), performed by `sync_io` (ADR 0017).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Generator, Iterator, Mapping
from typing import Any, Concatenate, ParamSpec, TypeVar

from openblox.client.client_steps import ClientSteps
from openblox.client.effects import Plan, Shell, Steps, shell_signature
from openblox.client.files import FileSteps
from openblox.client.results import ExecResult
from openblox.client.sandbox_steps import SandboxSteps
from openblox.client.shells import ClientShell, SandboxShell, StreamShell
from openblox.client.supervised import OutputChunk
from openblox.client.sync_io import SyncIO, blocking
from openblox.transport import Session

P = ParamSpec("P")
S = TypeVar("S")


class Files:
    """Files inside the sandbox, moved as argv and stdin: no shell, so no quoting to get wrong."""

    def __init__(self, io: SyncIO, steps: FileSteps) -> None:
        self._io = io
        self._steps = steps

    write = blocking(FileSteps.write)
    read = blocking(FileSteps.read)
    list = blocking(FileSteps.list)
    remove = blocking(FileSteps.remove)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.list())


class ExecStream(StreamShell):
    """Output of a running command as it arrives; see `Sandbox.stream`."""

    def __init__(self, drive: Generator[Any, None, None], steps: Steps[ExecResult]) -> None:
        super().__init__(steps)
        self._drive = drive

    def __iter__(self) -> Iterator[OutputChunk]:
        # Chunks go to the caller, not into memory: only the tail the denial classifier
        # needs is kept.
        return self._drive

    def __enter__(self) -> ExecStream:
        return self

    def __exit__(self, *_: object) -> None:
        self._drive.close()


def streaming(
    step: Callable[Concatenate[S, P], Plan[ExecResult]],
) -> Callable[Concatenate[Shell[SyncIO, S], P], ExecStream]:
    """The streaming plan `step` as a method that returns once the exec is open."""

    @functools.wraps(step)
    def call(self: Shell[SyncIO, S], /, *args: P.args, **kwargs: P.kwargs) -> ExecStream:
        steps = Steps(step(self._steps, *args, **kwargs))
        drive = self._io.drive(steps)
        next(drive)  # supervised.STARTED: the exec is open, its stdin on its way
        return ExecStream(drive, steps)

    call.__signature__ = shell_signature(step)  # type: ignore[attr-defined]
    return call


class Sandbox(SandboxShell):
    """A handle on one Sandbox: run commands and move files through `pods/exec`."""

    def __init__(self, io: SyncIO, steps: SandboxSteps) -> None:
        super().__init__(steps)
        self._io = io
        self.files = Files(io, steps.files)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *_: object) -> None:
        self.delete()

    def refresh(self) -> Sandbox:
        """Read the Sandbox again (its status, its pod)."""
        self._io.run(self._steps.refresh())
        return self

    delete = blocking(SandboxSteps.delete)
    preview_url = blocking(SandboxSteps.preview_url)
    exec = blocking(SandboxSteps.exec)
    stream = streaming(SandboxSteps.stream)
    write_file = blocking(SandboxSteps.write_file)
    read_file = blocking(SandboxSteps.read_file)
    start_process = blocking(SandboxSteps.start_process)
    processes = blocking(SandboxSteps.processes)
    stop_process = blocking(SandboxSteps.stop_process)
    logs = blocking(SandboxSteps.logs)


class Client(ClientShell[Sandbox]):
    """A connection to one cluster; cheap to keep, safe to share between threads.

    Credentials are found in one order (`openblox.transport.credentials`): `kubeconfig`,
    else KUBECONFIG, else the pod's ServiceAccount, else ~/.kube/config. The namespace
    defaults to the one of the same source (the pod's, or the context's).
    """

    def _connect(self, session: Session) -> None:
        self._io = SyncIO(session)

    def _handle(self, body: Mapping[str, Any]) -> Sandbox:
        # A lock per handle: threads may share it, and the activity stamp is debounced.
        steps = SandboxSteps(body, self._supervisors, threading.Lock())
        return Sandbox(self._io, steps)

    create = blocking(ClientSteps[Sandbox].create)
    get = blocking(ClientSteps[Sandbox].get)
    list = blocking(ClientSteps[Sandbox].list)
    delete = blocking(ClientSteps[Sandbox].delete)
    profiles = blocking(ClientSteps[Sandbox].profiles)
