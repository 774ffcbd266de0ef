"""A private certificate authority for a test or demo deployment, sans IO.

:func:`make_ca` creates a self-signed CA; :func:`issue` signs a certificate for a broker
or a client with its host names and addresses as subject alternative names (what TLS
clients verify). Both return PEM bytes; ``logferry certs`` (:mod:`broker.cli.certs_cmd`)
writes them to files. Keys are ECDSA P-256: small, fast to sign and verify, and accepted
by every TLS 1.2+ stack. A production deployment uses its own CA instead
(docs/security.md says how).

Built on the ``cryptography`` package (the X.509 builder); nothing here opens a file or
a socket, so the tests check certificates in memory.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import re
from collections.abc import Sequence
from typing import NamedTuple

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from broker.common.errors import ConfigError

CA_DAYS = 3650
CERT_DAYS = 825
"""The longest validity browsers accept for a leaf certificate; a test CA may not care,
but the habit is right."""

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_DNS = re.compile(
    r"(?=.{1,253}$)(\*\.)?([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*"
    r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
)


class Issued(NamedTuple):
    """A certificate and its private key, both PEM."""

    cert_pem: bytes
    key_pem: bytes


def check_name(name: str) -> str:
    """A certificate's name (its subject CN and its file name): ``broker-1``, ``mirror``."""
    if not _NAME.fullmatch(name):
        raise ConfigError(
            f"--name {name!r}: use 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit (it becomes a file name)"
        )
    return name


def alt_names(hosts: Sequence[str]) -> list[x509.GeneralName]:
    """``--host`` values as subject alternative names: an IP address or a DNS name each."""
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
            continue
        except ValueError:
            pass
        if not _DNS.fullmatch(host):
            raise ConfigError(f"--host {host!r}: not an IP address or a DNS name")
        names.append(x509.DNSName(host.lower()))
    return names


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def make_ca(common_name: str = "logferry private CA", days: int = CA_DAYS) -> Issued:
    """A new self-signed CA certificate (it may sign leaf certificates only)."""
    if days < 1:
        raise ConfigError(f"--days {days}: must be at least 1")
    key = _key()
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "logferry"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))  # clocks differ a little
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
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
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Issued(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def load_ca(cert_pem: bytes, key_pem: bytes) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """Parse a CA made by :func:`make_ca` (or any EC CA); ConfigError if it is not one."""
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"the CA files are not a PEM certificate and an unencrypted PEM key ({exc})") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ConfigError("the CA key is not an EC key (make one with `logferry certs ca`)")
    if cert.public_key() != key.public_key():
        raise ConfigError("the CA key does not belong to the CA certificate")
    try:
        is_ca = cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        is_ca = False
    if not is_ca:
        raise ConfigError("the CA certificate is not a CA (no basicConstraints CA:TRUE)")
    return cert, key


def issue(ca_cert_pem: bytes, ca_key_pem: bytes, name: str, hosts: Sequence[str] = (), days: int = CERT_DAYS) -> Issued:
    """A certificate for ``name`` signed by the CA, good for a TLS server and client.

    ``hosts`` become its subject alternative names (what a client checks against the
    host it dialled); a certificate only used as a client's needs none.
    """
    check_name(name)
    if days < 1:
        raise ConfigError(f"--days {days}: must be at least 1")
    sans = alt_names(hosts)
    ca_cert, ca_key = load_ca(ca_cert_pem, ca_key_pem)
    key = _key()
    now = _now()
    builder = (
        x509.CertificateBuilder()
        .subject_name(
            x509.Name(
                [
                    x509.NameAttribute(NameOID.ORGANIZATION_NAME, "logferry"),
                    x509.NameAttribute(NameOID.COMMON_NAME, name),
                ]
            )
        )
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(min(now + dt.timedelta(days=days), ca_cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_encipherment=False,
                key_cert_sign=False,
                crl_sign=False,
                content_commitment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return Issued(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


__all__ = ["CA_DAYS", "CERT_DAYS", "Issued", "alt_names", "check_name", "issue", "load_ca", "make_ca"]
