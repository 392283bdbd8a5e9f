"""The transport's credentials as a `kubernetes.client.Configuration`, for the benchmarks'
calls through the `kubernetes` package (the `bench` extra installs it; the shipped
package does not import it, ADR 0018). Credentials are found only by `openblox.transport`;
this turns what it found into the package's settings, and reads no kubeconfig itself.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s

from openblox.transport import Session


def kubernetes_configuration(session: Session) -> Any:
    """A Configuration on `session`'s credentials; its token is asked of the session before
    every request, so a rotated ServiceAccount token or an exec plugin's renewal is used."""
    credentials = session.credentials
    configuration = k8s.Configuration()
    configuration.host = credentials.server
    configuration.verify_ssl = not credentials.insecure
    configuration.ssl_ca_cert = credentials.ca_file
    configuration.cert_file = credentials.cert_file
    configuration.key_file = credentials.key_file
    configuration.tls_server_name = credentials.tls_server_name

    def refresh(config: Any) -> None:
        token = session.bearer_token()
        config.api_key = {"authorization": f"Bearer {token}"} if token else {}

    refresh(configuration)
    if session.refreshable:
        configuration.refresh_api_key_hook = refresh
    return configuration
