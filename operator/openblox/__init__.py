"""openblox: run untrusted, AI-generated code on Kubernetes, isolated correctly."""

__all__: list[str] = []
