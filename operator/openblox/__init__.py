"""openblox: run untrusted, AI-generated code on Kubernetes, isolated correctly.

`openblox.Client` and `openblox.AsyncClient` are the caller's entry points. They are
loaded on first use, so the pure layers (models, builders) import nothing heavy.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from openblox.client import AsyncClient, Client

__all__ = ["AsyncClient", "Client"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        import openblox.client

        return getattr(openblox.client, name)
    raise AttributeError(f"module 'openblox' has no attribute {name!r}")
