"""Find the credentials, in the one order `credentials.py` documents, and read their files.

This is the only module that reads a kubeconfig or the pod's ServiceAccount.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from openblox.transport.credentials import (
    Credentials,
    Source,
    choose_source,
    in_cluster_credentials,
    kubeconfig_credentials,
    merge_kubeconfigs,
)
from openblox.transport.errors import CredentialsError

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


def _find_source(
    kubeconfig: str | None,
    context: str | None,
    env: Mapping[str, str],
    service_account: Path,
    home: Path | None,
) -> Source:
    """Where credentials would come from, in the documented order; raises CredentialsError
    when there are none."""
    home_config = (home or Path.home()) / ".kube" / "config"
    in_cluster = bool(env.get("KUBERNETES_SERVICE_HOST")) and (service_account / "token").exists()
    return choose_source(
        explicit=kubeconfig,
        context=context,
        kubeconfig_env=env.get("KUBECONFIG"),
        in_cluster=in_cluster,
        home_config=str(home_config) if home_config.exists() else None,
    )


def standard_credentials_exist() -> bool:
    """Whether credentials are found without naming a kubeconfig (KUBECONFIG, a
    ServiceAccount, ~/.kube/config): a caller with a default of its own uses it otherwise."""
    try:
        _find_source(None, None, os.environ, SERVICE_ACCOUNT, None)
    except CredentialsError:
        return False
    return True


def load_credentials(
    kubeconfig: str | None = None,
    context: str | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    service_account: Path = SERVICE_ACCOUNT,
    home: Path | None = None,
) -> Credentials:
    """The credentials to use (explicit kubeconfig > KUBECONFIG > ServiceAccount >
    ~/.kube/config), with inline certificate data written to private files."""
    env = os.environ if environ is None else environ
    source = _find_source(kubeconfig, context, env, service_account, home)
    if source.paths:
        credentials = kubeconfig_credentials(
            merge_kubeconfigs([(path, _read_kubeconfig(path)) for path in source.paths]),
            context,
            ":".join(source.paths),
        )
    else:
        credentials = in_cluster_credentials(
            env["KUBERNETES_SERVICE_HOST"],
            env.get("KUBERNETES_SERVICE_PORT", "443"),
            str(service_account),
            _read_optional(service_account / "namespace"),
        )
    return materialized(credentials)


def _read_kubeconfig(path: str) -> Mapping[str, Any]:
    try:
        document = yaml.safe_load(Path(path).expanduser().read_text())
    except OSError as error:
        raise CredentialsError(f"cannot read the kubeconfig {path}: {error}") from error
    except yaml.YAMLError as error:
        raise CredentialsError(f"the kubeconfig {path} is not YAML: {error}") from error
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise CredentialsError(f"the kubeconfig {path} is not a mapping")
    return document


def _read_optional(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def materialized(credentials: Credentials) -> Credentials:
    """`credentials` with inline PEM data moved into files only this user can read."""
    changes: dict[str, Any] = {}
    for data_field, file_field in (
        ("ca_data", "ca_file"),
        ("cert_data", "cert_file"),
        ("key_data", "key_file"),
    ):
        data = getattr(credentials, data_field)
        if data is not None:
            changes[file_field] = _private_file(data)
            changes[data_field] = None
    return replace(credentials, **changes) if changes else credentials


def _private_file(data: bytes) -> str:
    handle, name = tempfile.mkstemp(prefix="openblox-kube-")  # mode 0600
    with os.fdopen(handle, "wb") as out:
        out.write(data)
    return name
