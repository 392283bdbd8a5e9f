"""The guest wing: every program openblox runs inside a sandbox (or a conformance canary).

They travel as source text (`python3 -I -S -c <source> ARGS`, or, for `supervise.c`, as a
static binary the reference image builds), so each must run in any image with a
`python3`: standard library only, self-contained, and no openblox imports.
tests/unit/test_layering.py holds every module here to that. The host side reads them
with `source`; nothing imports them to run them in-process (bar the unit tests, which run
them on this host).
"""

from importlib import resources

# The exec supervisor: `run`, `start`/`keep`, `ps`, `stop`, `logs` (its native twin is
# supervise.c, `run` only).
SUPERVISOR = "supervisor.py"
NATIVE_SUPERVISOR_SOURCE = "supervise.c"
# `files`: read, write, list, stat, remove, mkdir.
FILE_HELPER = "file_helper.py"
# The preview proxy's byte pipe to a loopback port.
RELAY_AGENT = "relay_agent.py"
# The conformance suite's adversarial probes, and its canaries (ordinary pods).
PROBE = "probe.py"
CANARY = "canary.py"


def source(name: str) -> str:
    """The text of one guest program, as it is sent into the sandbox."""
    return resources.files(__name__).joinpath(name).read_text()
