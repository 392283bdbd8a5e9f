"""Backend adapters: the openblox operator (through its client, or through plain
``pods/exec`` with no supervisor), and a bare runc pod as the baseline.

Another implementation plugs in as ``module:Class`` (see openblox.conformance.backend);
the class is called with ``(kube, settings)``.
"""

from __future__ import annotations

import importlib
from typing import cast

from openblox.conformance.backend import Backend
from openblox.conformance.cluster_api import Kube
from openblox.conformance.settings import Settings

BUILT_IN = ("operator", "operator-raw-exec", "bare-runc")


def load_backend(name: str, kube: Kube, settings: Settings) -> Backend:
    if name == "operator":
        from openblox.conformance.backends.operator import OperatorBackend

        return OperatorBackend(kube, settings)
    if name in ("operator-raw-exec", "raw-exec"):
        from openblox.conformance.backends.raw_exec import RawExecBackend

        return RawExecBackend(kube, settings)
    if name in ("bare-runc", "bare_runc", "runc"):
        from openblox.conformance.backends.bare_runc import BareRuncBackend

        return BareRuncBackend(kube, settings)
    if ":" in name:
        module_name, _, class_name = name.partition(":")
        factory = getattr(importlib.import_module(module_name), class_name)
        return cast(Backend, factory(kube, settings))
    raise ValueError(f"unknown backend {name!r} (built in: {', '.join(BUILT_IN)}, or module:Class)")
