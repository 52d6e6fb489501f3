"""Per-run certificates for the local control plane: one CA, serving and client certs, the SA key."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = datetime.timedelta(days=7)
PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


@dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class ClusterPKI:
    ca: KeyPair
    apiserver: KeyPair
    admin: KeyPair
    # The apiserver's client cert towards aggregated APIs (--proxy-client-cert-file): they trust it by
    # the requestheader CA and the allowed name `front-proxy-client`, then read the user from headers.
    front_proxy_client: KeyPair
    service_account_key: Path
    service_account_pub: Path


def _write_key(key: PrivateKey, path: Path) -> None:
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    path.write_bytes(pem)
    path.chmod(0o600)


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attrs)


def _builder(
    subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
    )


def _issue(
    ca_key: ec.EllipticCurvePrivateKey,
    ca_name: x509.Name,
    subject: x509.Name,
    out: Path,
    stem: str,
    *,
    server_sans: list[str] | None = None,
) -> KeyPair:
    key = ec.generate_private_key(ec.SECP256R1())
    usage = [ExtendedKeyUsageOID.SERVER_AUTH] if server_sans else [ExtendedKeyUsageOID.CLIENT_AUTH]
    builder = _builder(subject, ca_name, key.public_key()).add_extension(
        x509.ExtendedKeyUsage(usage), critical=False
    )
    if server_sans:
        sans: list[x509.GeneralName] = []
        for san in server_sans:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(san)))
            except ValueError:
                sans.append(x509.DNSName(san))
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    pair = KeyPair(out / f"{stem}.crt", out / f"{stem}.key")
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key, pair.key)
    return pair


def generate(out: Path, server_sans: list[str]) -> ClusterPKI:
    out.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("kvant-local-ca")
    ca_cert = (
        _builder(ca_name, ca_name, ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True
        )
        .sign(ca_key, hashes.SHA256())
    )
    ca = KeyPair(out / "ca.crt", out / "ca.key")
    ca.cert.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    _write_key(ca_key, ca.key)
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    sa_priv, sa_pub = out / "sa.key", out / "sa.pub"
    _write_key(sa_key, sa_priv)
    sa_pub.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return ClusterPKI(
        ca=ca,
        apiserver=_issue(ca_key, ca_name, _name("kube-apiserver"), out, "apiserver", server_sans=server_sans),
        admin=_issue(ca_key, ca_name, _name("kvant-admin", "system:masters"), out, "admin"),
        front_proxy_client=_issue(ca_key, ca_name, _name("front-proxy-client"), out, "front-proxy-client"),
        service_account_key=sa_priv,
        service_account_pub=sa_pub,
    )


def issue_serving_cert(pki_dir: Path, stem: str, sans: list[str]) -> KeyPair:
    """A serving certificate from an existing local CA (the node agent's log endpoint uses one)."""
    ca_key = serialization.load_pem_private_key((pki_dir / "ca.key").read_bytes(), password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise TypeError(f"{pki_dir / 'ca.key'} is not the EC key this module generates")
    ca_name = x509.load_pem_x509_certificate((pki_dir / "ca.crt").read_bytes()).subject
    return _issue(ca_key, ca_name, _name(stem), pki_dir, stem, server_sans=sans)
