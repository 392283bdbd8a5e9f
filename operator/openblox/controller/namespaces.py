"""What a namespace needs before its first sandbox pod, and its labels as the watch shows.

Pod Security `restricted` (enforce, `latest`) and the NetworkPolicy
`openblox-default-deny`. The watches remember both, so a settled namespace costs no
request; a label read the Namespace watch has not delivered yet is read once and kept.
"""

from __future__ import annotations

import logging

from openblox.builders.network_policy import build_network_policy
from openblox.controller.kube import STRATEGIC_MERGE_PATCH, Kube, is_conflict, path
from openblox.controller.watched import Watched
from openblox.names import LABEL_NAMESPACE_OPT_IN, NAMESPACE_OPT_IN_VALUE, NETWORK_POLICY_NAME

log = logging.getLogger(__name__)

PSA_LABELS = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}


class Namespaces:
    """The namespaces Sandboxes live in, as the Namespace and NetworkPolicy watches show them.

    Built once and shared: the reconcile and the pool keeper ask the same questions."""

    def __init__(self, kube: Kube, watched: Watched) -> None:
        self._kube = kube
        self._watched = watched

    def labels(self, namespace: str) -> dict[str, str]:
        known, labels = self._watched.namespace_labels(namespace)
        if known and labels is not None:
            return labels
        body = self._kube.get(path(plural="namespaces", name=namespace))
        labels = dict((body.get("metadata") or {}).get("labels") or {})
        self._watched.namespace_seen(namespace, labels)
        return labels

    def prepare(self, namespace: str) -> None:
        """Pod Security `restricted` and the default-deny policy, before any pod exists."""
        kube, watched = self._kube, self._watched
        current = self.labels(namespace)
        if current.get(LABEL_NAMESPACE_OPT_IN) == NAMESPACE_OPT_IN_VALUE and any(
            current.get(k) != v for k, v in PSA_LABELS.items()
        ):
            patched = kube.patch(
                path(plural="namespaces", name=namespace),
                {"metadata": {"labels": PSA_LABELS}},
                STRATEGIC_MERGE_PATCH,
            )
            watched.namespace_seen(namespace, (patched.get("metadata") or {}).get("labels"))
        if watched.has_policy(namespace):
            return  # the NetworkPolicy watch saw it; its deletion brings a reconcile
        try:
            kube.post(
                path(group="networking.k8s.io", plural="networkpolicies", namespace=namespace),
                build_network_policy(namespace),
            )
            log.info("created NetworkPolicy %s/%s", namespace, NETWORK_POLICY_NAME)
        except Exception as error:
            if not is_conflict(error):
                raise
        watched.policy_seen(namespace)
