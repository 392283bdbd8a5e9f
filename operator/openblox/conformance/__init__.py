"""The portable adversarial conformance suite: every isolation claim probed from inside.

Three ways to run it:

- ``pytest --pyargs openblox.conformance`` (settings from ``OPENBLOX_CONFORMANCE_*``
  environment variables, see :mod:`openblox.conformance.settings`);
- ``python -m openblox.conformance --backend operator --profile code-exec`` (writes the
  JSON and Markdown scorecards; ``--json`` prints the JSON one);
- as a Kubernetes Job (``kubectl apply -k conformance``), which runs the second form.

Any implementation can be measured by writing a :class:`~openblox.conformance.backend.Backend`
adapter; two ship here: the openblox operator and a bare pod under plain runc.
"""

from openblox.conformance.backend import (
    Backend,
    BackendError,
    Capability,
    ExecOutcome,
    Handle,
    Limits,
)
from openblox.conformance.properties import PROPERTIES, Category, Property
from openblox.conformance.runner import run_suite
from openblox.conformance.scorecard import Result, Scorecard, Status

__all__ = [
    "PROPERTIES",
    "Backend",
    "BackendError",
    "Capability",
    "Category",
    "ExecOutcome",
    "Handle",
    "Limits",
    "Property",
    "Result",
    "Scorecard",
    "Status",
    "run_suite",
]
