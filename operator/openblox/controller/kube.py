"""The API clients the operator uses, loaded once from the pod's ServiceAccount or a kubeconfig."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException


@dataclass(frozen=True)
class Kube:
    core: Any
    custom: Any
    networking: Any
    node: Any
    coordination: Any

    @classmethod
    def connect(cls) -> Kube:
        try:
            config.load_incluster_config()
        except config.ConfigException:
            config.load_kube_config()
        api = client.ApiClient()
        return cls(
            core=client.CoreV1Api(api),
            custom=client.CustomObjectsApi(api),
            networking=client.NetworkingV1Api(api),
            node=client.NodeV1Api(api),
            coordination=client.CoordinationV1Api(api),
        )


def status_of(error: BaseException) -> int | None:
    """The HTTP status of an API error, or None for anything else."""
    return error.status if isinstance(error, ApiException) else None


def is_not_found(error: BaseException) -> bool:
    return status_of(error) == 404


def is_conflict(error: BaseException) -> bool:
    return status_of(error) == 409
