"""Credential discovery: the one order, kubeconfig merging and parsing, tokens that change."""

from __future__ import annotations

import base64
import json
import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from openblox.transport.credentials import (
    IN_CLUSTER,
    Source,
    choose_source,
    kubeconfig_credentials,
    merge_kubeconfigs,
    parse_exec_credential,
)
from openblox.transport.discovery import load_credentials
from openblox.transport.errors import CredentialsError
from openblox.transport.session import Session


def _order(**given: object) -> Source:
    arguments: dict[str, object] = {
        "explicit": None,
        "context": None,
        "kubeconfig_env": None,
        "in_cluster": False,
        "home_config": None,
    }
    arguments.update(given)
    return choose_source(**arguments)  # type: ignore[arg-type]


def test_an_explicit_kubeconfig_wins_over_everything() -> None:
    source = _order(explicit="/a", kubeconfig_env="/b", in_cluster=True, home_config="/h")
    assert source == Source("kubeconfig", ("/a",))


def test_kubeconfig_env_wins_over_the_service_account_and_home() -> None:
    source = _order(kubeconfig_env="/b:/c::", in_cluster=True, home_config="/h")
    assert source == Source("kubeconfig", ("/b", "/c"))


def test_in_a_pod_the_service_account_wins_over_home() -> None:
    assert _order(in_cluster=True, home_config="/h") == Source(IN_CLUSTER)


def test_naming_a_context_skips_the_service_account() -> None:
    assert _order(in_cluster=True, home_config="/h", context="dev") == Source("kubeconfig", ("/h",))
    with pytest.raises(CredentialsError, match="context 'dev'"):
        _order(in_cluster=True, context="dev")


def test_home_is_the_last_resort_and_nothing_at_all_says_so() -> None:
    assert _order(home_config="/h") == Source("kubeconfig", ("/h",))
    with pytest.raises(CredentialsError, match="no Kubernetes credentials"):
        _order()


PEM = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


# `server` is positional-only, so no user field (`**user`) can be taken for it.
def _kubeconfig(server: str = "https://10.0.0.1:6443", /, **user: object) -> dict[str, object]:
    return {
        "current-context": "main",
        "clusters": [
            {
                "name": "c",
                "cluster": {
                    "server": server + "/",
                    "certificate-authority": "ca.crt",
                    "tls-server-name": "kubernetes",
                },
            }
        ],
        "users": [{"name": "u", "user": user or {"token": "t0k"}}],
        "contexts": [
            {"name": "main", "context": {"cluster": "c", "user": "u", "namespace": "team"}},
            {"name": "other", "context": {"cluster": "c", "user": "u"}},
        ],
    }


def test_a_kubeconfig_names_server_ca_token_and_namespace() -> None:
    merged = merge_kubeconfigs([("/etc/kube/config", _kubeconfig())])
    credentials = kubeconfig_credentials(merged, None, "/etc/kube/config")
    assert credentials.server == "https://10.0.0.1:6443"
    assert credentials.ca_file == "/etc/kube/ca.crt"  # relative to the file
    assert credentials.tls_server_name == "kubernetes"
    assert credentials.token == "t0k"
    assert credentials.namespace == "team"
    assert kubeconfig_credentials(merged, "other", "x").namespace == "default"


def test_merging_keeps_the_first_of_each_name_and_the_first_current_context() -> None:
    first = {"clusters": [{"name": "c", "cluster": {"server": "https://first"}}]}
    second = _kubeconfig("https://second")
    merged = merge_kubeconfigs([("/one/config", first), ("/two/config", second)])
    credentials = kubeconfig_credentials(merged, None, "both")
    assert credentials.server == "https://first"
    assert merged["current-context"] == "main"
    assert credentials.token == "t0k"


def test_inline_certificates_are_decoded_and_bad_base64_refused() -> None:
    user = {
        "client-certificate-data": base64.b64encode(PEM).decode(),
        "client-key-data": base64.b64encode(b"key").decode(),
    }
    credentials = kubeconfig_credentials(
        merge_kubeconfigs([("/k", _kubeconfig(**user))]), None, "k"
    )
    assert credentials.cert_data == PEM
    assert credentials.key_data == b"key"
    assert credentials.token is None
    broken = merge_kubeconfigs([("/k", _kubeconfig(**{"client-key-data": "not base64!"}))])
    with pytest.raises(CredentialsError, match="client-key-data is not base64"):
        kubeconfig_credentials(broken, None, "k")


def test_an_unknown_context_and_an_auth_provider_are_refused_plainly() -> None:
    merged = merge_kubeconfigs([("/k", _kubeconfig())])
    with pytest.raises(CredentialsError, match="no context named 'nope'"):
        kubeconfig_credentials(merged, "nope", "/k")
    provider = merge_kubeconfigs([("/k", _kubeconfig(**{"auth-provider": {"name": "oidc"}}))])
    with pytest.raises(CredentialsError, match="auth-provider users are not supported"):
        kubeconfig_credentials(provider, None, "/k")


def test_an_exec_plugin_is_read_with_its_args_and_env() -> None:
    plugin = {
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "command": "./bin/get-token",
        "args": ["--cluster", "c"],
        "env": [{"name": "REGION", "value": "eu"}],
    }
    merged = merge_kubeconfigs([("/home/me/.kube/config", _kubeconfig(exec=plugin))])
    found = kubeconfig_credentials(merged, None, "k").exec_plugin
    assert found is not None
    assert found.command == "/home/me/.kube/bin/get-token"
    assert found.args == ("--cluster", "c")
    assert found.env == (("REGION", "eu"),)
    assert found.api_version == "client.authentication.k8s.io/v1beta1"


def test_an_exec_credential_gives_its_token_and_expiry() -> None:
    printed = json.dumps(
        {
            "kind": "ExecCredential",
            "status": {"token": "abc", "expirationTimestamp": "2030-01-02T03:04:05Z"},
        }
    )
    issued = parse_exec_credential(printed, "get-token")
    assert issued.token == "abc"
    assert issued.expires_at == datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    with pytest.raises(CredentialsError, match="gave no token"):
        parse_exec_credential('{"status": {"clientCertificateData": "x"}}', "get-token")
    with pytest.raises(CredentialsError, match="did not print JSON"):
        parse_exec_credential("Error: login first", "get-token")


# ------------------------------------------------------------------ discovery (local files)


def test_discovery_applies_the_order_to_real_files(tmp_path: Path) -> None:
    home, service_account = tmp_path / "home", tmp_path / "sa"
    (home / ".kube").mkdir(parents=True)
    (home / ".kube" / "config").write_text(yaml.safe_dump(_kubeconfig("https://home")))
    service_account.mkdir()
    (service_account / "token").write_text("sa-token\n")
    (service_account / "namespace").write_text("tenant\n")
    env_config = tmp_path / "env-config"
    env_config.write_text(yaml.safe_dump(_kubeconfig("https://env")))
    pod = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}

    def found(**environ: str) -> tuple[str, str]:
        credentials = load_credentials(environ=environ, service_account=service_account, home=home)
        return credentials.server, credentials.namespace

    assert found() == ("https://home", "team")
    assert found(**pod) == ("https://[fd00::1]:443", "tenant")
    assert found(**pod, KUBECONFIG=str(env_config)) == ("https://env", "team")


def test_inline_data_lands_in_files_only_the_user_can_read(tmp_path: Path) -> None:
    user = {
        "client-certificate-data": base64.b64encode(PEM).decode(),
        "client-key-data": base64.b64encode(b"secret key").decode(),
    }
    config = tmp_path / "config"
    config.write_text(yaml.safe_dump(_kubeconfig(**user)))
    credentials = load_credentials(str(config), environ={})
    assert credentials.key_data is None and credentials.key_file is not None
    key = Path(credentials.key_file)
    assert key.read_bytes() == b"secret key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600


def test_a_missing_or_broken_kubeconfig_says_which_file(tmp_path: Path) -> None:
    with pytest.raises(CredentialsError, match="cannot read the kubeconfig"):
        load_credentials(str(tmp_path / "absent"), environ={})
    broken = tmp_path / "broken"
    broken.write_text("clusters: [")
    with pytest.raises(CredentialsError, match="is not YAML"):
        load_credentials(str(broken), environ={})


def test_a_token_file_is_read_again_after_it_rotates(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    config = tmp_path / "config"
    config.write_text(yaml.safe_dump(_kubeconfig(tokenFile="token")))
    session = Session.discover(str(config))
    assert session.authorization() == {"Authorization": "Bearer first"}
    token.write_text("second\n")
    assert session.bearer_token() == "first"  # re-read on a timer, not on every request
    session.invalidate()  # what a 401 does
    assert session.bearer_token() == "second"


def test_an_exec_plugin_is_run_for_its_token(tmp_path: Path) -> None:
    plugin = tmp_path / "plugin"
    calls = tmp_path / "calls"
    plugin.write_text(
        "#!/bin/sh\n"
        f'echo run >> "{calls}"\n'
        'test "$REGION" = eu || exit 3\n'
        'echo "{\\"status\\": {\\"token\\": \\"from-plugin-$1\\"}}"\n'
    )
    plugin.chmod(0o700)
    spec = {"command": str(plugin), "args": ["x"], "env": [{"name": "REGION", "value": "eu"}]}
    config = tmp_path / "config"
    config.write_text(yaml.safe_dump(_kubeconfig(exec=spec)))
    session = Session.discover(str(config))
    assert session.bearer_token() == "from-plugin-x"
    assert session.bearer_token() == "from-plugin-x"
    assert calls.read_text().count("run") == 1  # no expiry: kept until a 401


def test_a_failing_exec_plugin_says_what_it_printed(tmp_path: Path) -> None:
    plugin = tmp_path / "plugin"
    plugin.write_text("#!/bin/sh\necho 'please log in' >&2\nexit 1\n")
    plugin.chmod(0o700)
    config = tmp_path / "config"
    config.write_text(yaml.safe_dump(_kubeconfig(exec={"command": str(plugin)})))
    with pytest.raises(CredentialsError, match="exited 1: please log in"):
        Session.discover(str(config)).bearer_token()
