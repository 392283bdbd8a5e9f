"""What the blocking and the asyncio shells share besides their calls: how a client is made
from credentials, and what a handle shows without asking the cluster (its name, status,
pod and limits, as last read). Each shell adds only its I/O and its protocols (`with` or
`async with`, `for` or `async for`); its calls are the plans of `client_steps`,
`sandbox_steps` and `files`, made methods by `sync_io.blocking` or `async_io.awaitable`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Generic, TypeVar

from openblox.client.client_steps import ClientSteps
from openblox.client.effects import Steps
from openblox.client.limits import ExecLimits
from openblox.client.results import ExecResult
from openblox.client.sandbox_steps import SandboxSteps
from openblox.transport import Session

H = TypeVar("H")


class ClientShell(Generic[H]):
    """A connection to one cluster.

    Credentials are found in one order (`openblox.transport.credentials`): `kubeconfig`,
    else KUBECONFIG, else the pod's ServiceAccount, else ~/.kube/config. The namespace
    defaults to the one of the same source (the pod's, or the context's).
    """

    def __init__(
        self,
        namespace: str | None = None,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
    ) -> None:
        session = Session.discover(kubeconfig, context)
        self._connect(session)
        # Per pod, for every handle of this client: False once its image turned out to
        # lack the native supervisor.
        self._supervisors: dict[str, bool] = {}
        self._steps = ClientSteps(namespace or session.namespace, self._handle)

    def _connect(self, session: Session) -> None:
        """Make this shell's I/O on the session."""
        raise NotImplementedError

    def _handle(self, body: Mapping[str, Any]) -> H:
        """This shell's handle on the Sandbox `body`."""
        raise NotImplementedError

    @property
    def namespace(self) -> str:
        """Where calls that name no namespace go."""
        return self._steps.namespace

    @namespace.setter
    def namespace(self, namespace: str) -> None:
        self._steps.namespace = namespace


class SandboxShell:
    """A handle on one Sandbox, as far as it shows without asking the cluster."""

    def __init__(self, steps: SandboxSteps) -> None:
        self._steps = steps
        self.name = steps.name
        self.namespace = steps.namespace
        self.profile = steps.profile

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.namespace}/{self.name}, profile={self.profile})"

    @property
    def status(self) -> Mapping[str, Any]:
        return self._steps.status

    @property
    def pod(self) -> str:
        """The pod's name, as the operator reported it: a warm pod handed out from a pool
        keeps the pool's name, so it is read from `status.podName`, never guessed."""
        return self._steps.pod

    @property
    def exec_limits(self) -> ExecLimits:
        """The profile's timeout, output cap and process cap, as the operator published them."""
        return self._steps.exec_limits

    @property
    def _body(self) -> Mapping[str, Any]:
        """The Sandbox as last read."""
        return self._steps.body


class StreamShell:
    """A command's output as it arrives; `result` once it has all been read."""

    def __init__(self, steps: Steps[ExecResult]) -> None:
        self._run = steps

    @property
    def result(self) -> ExecResult:
        if not self._run.done:
            raise RuntimeError("the command's result is known once its output has been read")
        return self._run.result
