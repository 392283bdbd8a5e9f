"""Which credentials to use, and what a kubeconfig says: the pure half of discovery.

The order, the same for the client, the CLI, the operator, the preview proxy, the
conformance suite and the benchmarks (`discovery.load_credentials` applies it):

1. a kubeconfig passed explicitly (`--kubeconfig`, `Client(kubeconfig=...)`);
2. the files in `KUBECONFIG` (several, separated by `:`, are merged as kubectl merges
   them: the first file to name a cluster, user or context wins);
3. the pod's ServiceAccount, when running in a pod (`KUBERNETES_SERVICE_HOST` is set and
   the token is mounted), unless a context was named;
4. `~/.kube/config`.

This is kubectl's order. A kubeconfig named explicitly or through `KUBECONFIG` wins over
a ServiceAccount, so a process in a pod can be pointed elsewhere on purpose; with neither,
a pod uses its own identity, and a workstation its `~/.kube/config`. The namespace comes
from the same place as the credentials: the ServiceAccount's namespace in a pod, the
context's `namespace` (else `default`) from a kubeconfig.

Users of kind `token`, `tokenFile`, client certificates (files or `-data`) and `exec`
credential plugins are supported; `auth-provider` users (long deprecated) are refused
with a message that says so.
"""

from __future__ import annotations

import base64
import json
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from openblox.timestamps import parse_optional_timestamp
from openblox.transport.errors import CredentialsError

IN_CLUSTER = "in-cluster"


@dataclass(frozen=True)
class ExecPlugin:
    """A kubeconfig user's `exec` credential plugin: a command that prints an ExecCredential."""

    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    api_version: str = "client.authentication.k8s.io/v1"


@dataclass(frozen=True)
class Credentials:
    """Where the API server is and how to prove who we are.

    `*_data` fields hold PEM bytes a kubeconfig carried inline; `discovery` writes them to
    private files (OpenSSL loads client certificates only from files) before use.
    """

    server: str
    namespace: str = "default"
    source: str = ""
    ca_file: str | None = None
    ca_data: bytes | None = None
    insecure: bool = False
    tls_server_name: str | None = None
    token: str | None = None
    token_file: str | None = None
    cert_file: str | None = None
    cert_data: bytes | None = None
    key_file: str | None = None
    key_data: bytes | None = None
    exec_plugin: ExecPlugin | None = None


@dataclass(frozen=True)
class Source:
    """Where credentials come from: kubeconfig files, or the pod's ServiceAccount."""

    kind: str  # "kubeconfig" or IN_CLUSTER
    paths: tuple[str, ...] = ()


def choose_source(
    *,
    explicit: str | None,
    context: str | None,
    kubeconfig_env: str | None,
    in_cluster: bool,
    home_config: str | None,
) -> Source:
    """The documented order (module docstring). `home_config` is ~/.kube/config if it exists."""
    if explicit:
        return Source("kubeconfig", (explicit,))
    paths = tuple(p for p in (kubeconfig_env or "").split(":") if p)
    if paths:
        return Source("kubeconfig", paths)
    if in_cluster and context is None:
        return Source(IN_CLUSTER)
    if home_config:
        return Source("kubeconfig", (home_config,))
    if in_cluster:
        raise CredentialsError(f"context {context!r} was named, but there is no kubeconfig")
    raise CredentialsError(
        "no Kubernetes credentials: pass a kubeconfig, set KUBECONFIG, run in a pod with a "
        "ServiceAccount token, or write ~/.kube/config"
    )


def in_cluster_credentials(
    host: str, port: str, service_account: str, namespace: str
) -> Credentials:
    """The pod's ServiceAccount (`service_account` is the mounted directory)."""
    if ":" in host:
        host = f"[{host}]"
    return Credentials(
        server=f"https://{host}:{port}",
        namespace=namespace or "default",
        source=IN_CLUSTER,
        ca_file=posixpath.join(service_account, "ca.crt"),
        token_file=posixpath.join(service_account, "token"),
    )


def merge_kubeconfigs(documents: Sequence[tuple[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """One kubeconfig from several (location, document) pairs, as kubectl merges them.

    The first to name a cluster, user or context wins, and so does the first
    current-context. Relative file paths are made absolute against their own file's folder.
    """
    merged: dict[str, Any] = {"clusters": [], "users": [], "contexts": []}
    for location, document in documents:
        base = posixpath.dirname(location)
        for kind in ("clusters", "users", "contexts"):
            seen = {entry.get("name") for entry in merged[kind]}
            for entry in document.get(kind) or []:
                if isinstance(entry, Mapping) and entry.get("name") not in seen:
                    merged[kind].append(_absolute_paths(kind, entry, base))
                    seen.add(entry.get("name"))
        if not merged.get("current-context") and document.get("current-context"):
            merged["current-context"] = document["current-context"]
    return merged


_PATH_KEYS = {
    "clusters": ("certificate-authority",),
    "users": ("client-certificate", "client-key", "tokenFile"),
}


def _absolute_paths(kind: str, entry: Mapping[str, Any], base: str) -> dict[str, Any]:
    inner_key = kind[:-1]
    inner = dict(entry.get(inner_key) or {})
    for key in _PATH_KEYS.get(kind, ()):
        if inner.get(key):
            inner[key] = posixpath.normpath(posixpath.join(base, str(inner[key])))
    if kind == "users" and isinstance(inner.get("exec"), Mapping):
        command = str(inner["exec"].get("command") or "")
        # A command given as a relative path (./bin/x) is relative to the file, as kubectl does.
        if "/" in command and not command.startswith("/"):
            inner["exec"] = {
                **inner["exec"],
                "command": posixpath.normpath(posixpath.join(base, command)),
            }
    return {**entry, inner_key: inner}


def kubeconfig_credentials(
    config: Mapping[str, Any], context: str | None, where: str
) -> Credentials:
    """The credentials of `context` (else the current context) in a merged kubeconfig."""

    def named(kind: str, name: str) -> Mapping[str, Any]:
        for entry in config.get(kind) or []:
            if entry.get("name") == name:
                return dict(entry.get(kind[:-1]) or {})
        raise CredentialsError(f"{where}: no {kind[:-1]} named {name!r}")

    context_name = context or str(config.get("current-context") or "")
    if not context_name:
        raise CredentialsError(f"{where}: no current-context, and no context was named")
    chosen = named("contexts", context_name)
    cluster = named("clusters", str(chosen.get("cluster") or ""))
    user = named("users", str(chosen.get("user") or "")) if chosen.get("user") else {}
    if user.get("auth-provider"):
        raise CredentialsError(
            f"{where}: auth-provider users are not supported; use an exec credential plugin"
        )
    if not cluster.get("server"):
        raise CredentialsError(f"{where}: cluster {chosen.get('cluster')!r} has no server")
    return Credentials(
        server=str(cluster["server"]).rstrip("/"),
        namespace=str(chosen.get("namespace") or "default"),
        source=f"{where} (context {context_name})",
        ca_file=_optional(cluster.get("certificate-authority")),
        ca_data=_data(cluster, "certificate-authority-data", where),
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        tls_server_name=_optional(cluster.get("tls-server-name")),
        token=_optional(user.get("token")),
        token_file=_optional(user.get("tokenFile")),
        cert_file=_optional(user.get("client-certificate")),
        cert_data=_data(user, "client-certificate-data", where),
        key_file=_optional(user.get("client-key")),
        key_data=_data(user, "client-key-data", where),
        exec_plugin=_exec_plugin(user.get("exec"), where),
    )


def _optional(value: object) -> str | None:
    return str(value) if value else None


def _data(entry: Mapping[str, Any], key: str, where: str) -> bytes | None:
    if not entry.get(key):
        return None
    try:
        return base64.b64decode(str(entry[key]), validate=True)
    except ValueError as error:
        raise CredentialsError(f"{where}: {key} is not base64") from error


def _exec_plugin(spec: object, where: str) -> ExecPlugin | None:
    if not spec:
        return None
    if not isinstance(spec, Mapping) or not spec.get("command"):
        raise CredentialsError(f"{where}: the user's exec plugin names no command")
    env = tuple(
        (str(item["name"]), str(item.get("value", "")))
        for item in spec.get("env") or []
        if isinstance(item, Mapping) and item.get("name")
    )
    return ExecPlugin(
        command=str(spec["command"]),
        args=tuple(str(arg) for arg in spec.get("args") or []),
        env=env,
        api_version=str(spec.get("apiVersion") or ExecPlugin.api_version),
    )


@dataclass(frozen=True)
class ExecCredential:
    """What an exec plugin printed: a token, and when it expires (None: it does not)."""

    token: str
    expires_at: datetime | None


def parse_exec_credential(output: bytes | str, command: str) -> ExecCredential:
    """The token of the ExecCredential an exec plugin printed; raises if it has none."""
    try:
        document = json.loads(output)
    except ValueError as error:
        raise CredentialsError(f"exec plugin {command} did not print JSON") from error
    status = document.get("status") if isinstance(document, dict) else None
    if not isinstance(status, dict):
        raise CredentialsError(f"exec plugin {command} printed no ExecCredential status")
    token = status.get("token")
    if not token:
        # Plugins that hand out client certificates instead are rare; say so plainly.
        raise CredentialsError(
            f"exec plugin {command} gave no token (client certificates from plugins are "
            "not supported)"
        )
    return ExecCredential(str(token), parse_optional_timestamp(status.get("expirationTimestamp")))


def exec_plugin_info(plugin: ExecPlugin) -> str:
    """KUBERNETES_EXEC_INFO for the plugin: non-interactive, as the caller has no terminal."""
    return json.dumps(
        {"apiVersion": plugin.api_version, "kind": "ExecCredential", "spec": {"interactive": False}}
    )
