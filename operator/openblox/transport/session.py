"""Credentials in use: the bearer token as it is now, and the TLS context. Thread-safe.

A ServiceAccount token is re-read as the kubelet rotates it; an exec plugin's token is
fetched again shortly before it expires (or after a 401, through `invalidate`).
"""

from __future__ import annotations

import os
import ssl
import subprocess
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from openblox.transport.credentials import (
    Credentials,
    ExecPlugin,
    exec_plugin_info,
    parse_exec_credential,
)
from openblox.transport.discovery import load_credentials
from openblox.transport.errors import CredentialsError

TOKEN_REREAD_SECONDS = 60.0
# An exec plugin's token is renewed this long before it expires.
EXEC_TOKEN_MARGIN = timedelta(seconds=30)
EXEC_PLUGIN_TIMEOUT_SECONDS = 60.0


class Session:
    """One set of credentials, shared by every request and exec stream made with them."""

    def __init__(self, credentials: Credentials) -> None:
        self.credentials = credentials
        self._lock = threading.Lock()
        self._token: str | None = credentials.token
        self._token_until: float | datetime | None = None
        self._ssl: ssl.SSLContext | None = None

    @classmethod
    def discover(cls, kubeconfig: str | None = None, context: str | None = None) -> Session:
        """A session on the credentials found in the documented order."""
        return cls(load_credentials(kubeconfig, context))

    @property
    def server(self) -> str:
        return self.credentials.server

    @property
    def namespace(self) -> str:
        return self.credentials.namespace

    @property
    def refreshable(self) -> bool:
        """Whether the token can change (a file the kubelet rotates, an exec plugin)."""
        return self.credentials.token_file is not None or self.credentials.exec_plugin is not None

    def bearer_token(self) -> str | None:
        """The token to send now, or None when the credentials are a client certificate."""
        if not self.refreshable:
            return self.credentials.token
        with self._lock:
            if not self._fresh():
                self._refresh()
            return self._token

    def invalidate(self) -> None:
        """Forget a cached token (the API server answered 401): the next call fetches anew."""
        with self._lock:
            self._token_until = None

    def authorization(self) -> dict[str, str]:
        """The Authorization header, if there is a token."""
        token = self.bearer_token()
        return {"Authorization": f"Bearer {token}"} if token else {}

    def ssl_context(self) -> ssl.SSLContext:
        """The client TLS context: the cluster's CA (or none checked), the client certificate."""
        with self._lock:
            if self._ssl is None:
                self._ssl = client_context(self.credentials)
            return self._ssl

    def _fresh(self) -> bool:
        until = self._token_until
        if until is None:
            return False
        if isinstance(until, datetime):
            return datetime.now(UTC) < until
        return time.monotonic() < until

    def _refresh(self) -> None:
        credentials = self.credentials
        if credentials.exec_plugin is not None:
            plugin = credentials.exec_plugin
            issued = parse_exec_credential(_run_plugin(plugin), plugin.command)
            self._token = issued.token
            # No expiry: keep it until the API server refuses it (`invalidate`).
            self._token_until = (
                issued.expires_at - EXEC_TOKEN_MARGIN
                if issued.expires_at
                else datetime.max.replace(tzinfo=UTC)
            )
        elif credentials.token_file is not None:
            try:
                self._token = Path(credentials.token_file).read_text().strip()
            except OSError as error:
                raise CredentialsError(
                    f"cannot read the token {credentials.token_file}: {error}"
                ) from error
            self._token_until = time.monotonic() + TOKEN_REREAD_SECONDS


def client_context(credentials: Credentials) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=credentials.ca_file)
    if credentials.ca_data:
        context.load_verify_locations(cadata=credentials.ca_data.decode())
    if credentials.insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if credentials.cert_file:
        context.load_cert_chain(credentials.cert_file, credentials.key_file)
    return context


def _run_plugin(plugin: ExecPlugin) -> bytes:
    env = {**os.environ, **dict(plugin.env), "KUBERNETES_EXEC_INFO": exec_plugin_info(plugin)}
    try:
        done = subprocess.run(
            [plugin.command, *plugin.args],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=EXEC_PLUGIN_TIMEOUT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise CredentialsError(f"exec plugin {plugin.command} failed: {error}") from error
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip()[-500:]
        raise CredentialsError(f"exec plugin {plugin.command} exited {done.returncode}: {said}")
    return done.stdout
