"""Certificates and kubeconfigs for the embedded single-node cluster.

    python3 cluster/pki.py STATE_DIR NODE_NAME NODE_IP SERVICE_IP

Idempotent: the CA and the service-account key pair are made once; a leaf certificate
is made again only when the names it must carry have changed (a new node address, say),
so a restart keeps every credential that is still right.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = dt.timedelta(days=3650)
CLIENT = ExtendedKeyUsageOID.CLIENT_AUTH
SERVER = ExtendedKeyUsageOID.SERVER_AUTH


@dataclass(frozen=True)
class Leaf:
    """One certificate: who it names, which groups, what it may do, where it answers."""

    file: str
    common_name: str
    organization: str | None
    usages: tuple[x509.ObjectIdentifier, ...]
    dns_names: tuple[str, ...] = ()
    ip_addresses: tuple[str, ...] = ()


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _name(common_name: str, organization: str | None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attributes.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


def ensure_ca(pki: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    cert_path, key_path = pki / "ca.crt", pki / "ca.key"
    if cert_path.exists() and key_path.exists():
        key = serialization.load_pem_private_key(key_path.read_bytes(), None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        return x509.load_pem_x509_certificate(cert_path.read_bytes()), key
    key = _new_key()
    now = dt.datetime.now(dt.UTC)
    name = _name("openblox-embedded-ca", None)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    _write_key(key_path, key)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert, key


def _leaf_is_current(path: Path, leaf: Leaf, ca: x509.Certificate) -> bool:
    if not path.exists():
        return False
    cert = x509.load_pem_x509_certificate(path.read_bytes())
    if cert.issuer != ca.subject or cert.subject != _name(leaf.common_name, leaf.organization):
        return False
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return not (leaf.dns_names or leaf.ip_addresses)
    have_dns = set(sans.get_values_for_type(x509.DNSName))
    have_ips = {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)}
    return have_dns == set(leaf.dns_names) and have_ips == set(leaf.ip_addresses)


def ensure_leaf(
    pki: Path, leaf: Leaf, ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey
) -> None:
    cert_path, key_path = pki / f"{leaf.file}.crt", pki / f"{leaf.file}.key"
    if key_path.exists() and _leaf_is_current(cert_path, leaf, ca):
        return
    key = _new_key()
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(leaf.common_name, leaf.organization))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(list(leaf.usages)), critical=False)
    )
    if leaf.dns_names or leaf.ip_addresses:
        names: list[x509.GeneralName] = [x509.DNSName(n) for n in leaf.dns_names]
        names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in leaf.ip_addresses]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    _write_key(key_path, key)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def ensure_service_account_keys(pki: Path) -> None:
    key_path, pub_path = pki / "sa.key", pki / "sa.pub"
    if key_path.exists() and pub_path.exists():
        return
    key = _new_key()
    _write_key(key_path, key)
    pub_path.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def write_kubeconfig(state: Path, user: str, server: str) -> None:
    """A kubeconfig is JSON-compatible YAML, so no YAML library is needed here."""
    pki = state / "pki"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "openblox",
                "cluster": {
                    "server": server,
                    "certificate-authority-data": _b64(pki / "ca.crt"),
                },
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": _b64(pki / f"{user}.crt"),
                    "client-key-data": _b64(pki / f"{user}.key"),
                },
            }
        ],
        "contexts": [{"name": "openblox", "context": {"cluster": "openblox", "user": user}}],
        "current-context": "openblox",
    }
    path = state / f"{user}.kubeconfig"
    path.write_text(json.dumps(config, indent=2) + "\n")
    path.chmod(0o600)


def leaves(node_name: str, node_ip: str, service_ip: str) -> list[Leaf]:
    api_names = (
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
        "localhost",
        node_name,
    )
    return [
        Leaf(
            "apiserver",
            "kube-apiserver",
            None,
            (SERVER,),
            api_names,
            ("127.0.0.1", node_ip, service_ip),
        ),
        Leaf(
            "apiserver-kubelet-client", "kube-apiserver-kubelet-client", "system:masters", (CLIENT,)
        ),
        Leaf("admin", "openblox-admin", "system:masters", (CLIENT,)),
        Leaf("kubelet", f"system:node:{node_name}", "system:nodes", (CLIENT,)),
        Leaf(
            "kubelet-serving",
            f"system:node:{node_name}",
            "system:nodes",
            (SERVER,),
            (node_name, "localhost"),
            ("127.0.0.1", node_ip),
        ),
        Leaf("controller-manager", "system:kube-controller-manager", None, (CLIENT,)),
        Leaf("scheduler", "system:kube-scheduler", None, (CLIENT,)),
        Leaf("kube-proxy", "system:kube-proxy", None, (CLIENT,)),
        Leaf("kube-router", "openblox:kube-router", None, (CLIENT,)),
        Leaf("etcd-server", "etcd", None, (SERVER, CLIENT), ("localhost",), ("127.0.0.1",)),
        Leaf("etcd-client", "kube-apiserver-etcd-client", None, (CLIENT,)),
    ]


KUBECONFIG_USERS = (
    "admin",
    "kubelet",
    "controller-manager",
    "scheduler",
    "kube-proxy",
    "kube-router",
)


def main() -> None:
    state, node_name, node_ip, service_ip = Path(sys.argv[1]), *sys.argv[2:5]
    pki = state / "pki"
    pki.mkdir(parents=True, exist_ok=True)
    pki.chmod(0o700)
    ca, ca_key = ensure_ca(pki)
    for leaf in leaves(node_name, node_ip, service_ip):
        ensure_leaf(pki, leaf, ca, ca_key)
    ensure_service_account_keys(pki)
    for user in KUBECONFIG_USERS:
        write_kubeconfig(state, user, "https://127.0.0.1:6443")


if __name__ == "__main__":
    main()
