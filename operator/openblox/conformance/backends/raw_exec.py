"""The operator's sandboxes, driven the way any other tool would: plain ``pods/exec``.

Sandboxes are created through ``openblox.Client`` as on the operator path, but every
command runs as ``kubectl exec`` runs it: argv straight to the container, over the
websocket exec protocol, with no openblox supervisor around it. Whatever holds here
holds for every process in the pod, however it was started; whatever only the
supervisor gives (the exec timeout's tree kill, the output cap) does not, and the
scorecard says so.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace

from openblox.client import OpenbloxClientError, Sandbox
from openblox.conformance.backend import Capability, ExecOutcome, Handle
from openblox.conformance.backends.operator import OperatorBackend
from openblox.names import CONTAINER_NAME
from openblox.transport import ExecOutput, ExecSocket, ExecStreamError

# What a property may make a command print is bounded (RES-005 floods 8 MiB); past this,
# the suite's own memory is at stake, so the rest is read and dropped.
KEEP_BYTES = 64 << 20


class RawExecBackend(OperatorBackend):
    name = "operator-raw-exec"
    # Activity is what callers stamp through the API server (openblox.sh/last-activity);
    # a plain pods/exec stamps nothing, so its idle clock runs from the create.
    execs_record_activity = False
    unsupported: Mapping[Capability, str] = {
        Capability.FILES: (
            "plain pods/exec has no file API; the files API is the openblox client's, "
            "measured on the operator path"
        ),
        Capability.CONTROL_PLANE: (
            "the control-plane properties attack the Kubernetes API, not a command in the "
            "sandbox, so they do not depend on how commands start; measured on the operator path"
        ),
    }

    def _handle(self, sandbox: Sandbox) -> Handle:
        handle = super()._handle(sandbox)
        # Nothing bounds a raw exec's time or output but the pod itself.
        limits = replace(handle.limits, output_bytes=None, exec_timeout_seconds=None)
        return replace(handle, limits=limits)

    def _run(
        self, handle: Handle, argv: Sequence[str], stdin: bytes | None, timeout: float
    ) -> ExecOutcome:
        started = time.monotonic()
        output = ExecOutput(keep_stdout=KEEP_BYTES, keep_stderr=KEEP_BYTES)
        try:
            stream = ExecSocket(
                self.kube.session,
                handle.pod_namespace or self.namespace,
                handle.pod or handle.name,
                CONTAINER_NAME,
                argv,
                stdin=stdin is not None,
                timeout=timeout,
            )
        except (OpenbloxClientError, ExecStreamError) as error:
            return ExecOutcome(b"", b"", None, error=f"{type(error).__name__}: {error}")
        try:
            if stdin is not None:
                stream.send_stdin(stdin)
                stream.close_stdin()
            stream.read_to_end(started + timeout, output)
        except TimeoutError:
            # Closing the stream does not stop the command: nothing in the pod does.
            return ExecOutcome(
                *_kept(output), None, timed_out=True, duration=time.monotonic() - started
            )
        except (OpenbloxClientError, ExecStreamError) as error:
            return ExecOutcome(
                *_kept(output),
                None,
                duration=time.monotonic() - started,
                error=f"{type(error).__name__}: {error}",
            )
        finally:
            stream.close()
        duration = time.monotonic() - started
        if not output.status:
            return ExecOutcome(*_kept(output), None, duration=duration, error="no exit status")
        return ExecOutcome(*_kept(output), output.exit_code, duration=duration)


def _kept(output: ExecOutput) -> tuple[bytes, bytes]:
    return bytes(output.stdout), bytes(output.stderr)
