"""``logferry certs``: a private CA and certificates that real TLS stacks accept.

The builders are checked in memory (sans IO); the command is checked for its files, their
modes and its errors (exit 2 for usage, 1 for a write that fails).
"""

from __future__ import annotations

import ipaddress
import ssl
import stat
from pathlib import Path

import pytest
from cryptography import x509

from broker.cli.main import main
from broker.common import certs
from broker.common.errors import ConfigError


@pytest.fixture(scope="module")
def ca() -> certs.Issued:
    return certs.make_ca()


def test_the_ca_is_a_ca_and_signs_leaf_certificates_with_sans(ca: certs.Issued) -> None:
    issued = certs.issue(ca.cert_pem, ca.key_pem, "broker-1", ["127.0.0.1", "localhost", "::1"])
    cert = x509.load_pem_x509_certificate(issued.cert_pem)
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    assert cert.issuer == ca_cert.subject
    cert.verify_directly_issued_by(ca_cert)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["localhost"]
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1")]
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert ca_cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


def test_the_stdlib_ssl_module_loads_what_it_issues(ca: certs.Issued, tmp_path: Path) -> None:
    issued = certs.issue(ca.cert_pem, ca.key_pem, "client", [])
    (tmp_path / "c.pem").write_bytes(issued.cert_pem)
    (tmp_path / "c.key").write_bytes(issued.key_pem)
    context = ssl.create_default_context(cadata=ca.cert_pem.decode())
    context.load_cert_chain(tmp_path / "c.pem", tmp_path / "c.key")


@pytest.mark.parametrize("host", ["", "bad host", "a..b", "x" * 300, "-lead"])
def test_bad_hosts_are_usage_errors(host: str) -> None:
    with pytest.raises(ConfigError, match="--host"):
        certs.alt_names([host])


@pytest.mark.parametrize("name", ["", "../x", "a/b", ".hidden"])
def test_bad_names_are_usage_errors(name: str) -> None:
    with pytest.raises(ConfigError, match="--name"):
        certs.check_name(name)


def test_a_leaf_is_not_accepted_as_a_ca(ca: certs.Issued) -> None:
    leaf = certs.issue(ca.cert_pem, ca.key_pem, "leaf", ["localhost"])
    with pytest.raises(ConfigError, match="not a CA"):
        certs.issue(leaf.cert_pem, leaf.key_pem, "other", [])
    with pytest.raises(ConfigError, match="does not belong"):
        certs.issue(ca.cert_pem, leaf.key_pem, "other", [])
    with pytest.raises(ConfigError, match="PEM"):
        certs.issue(b"junk", b"junk", "other", [])


# -- the command ------------------------------------------------------------------------


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_certs_ca_and_issue_write_files_with_private_keys_0600(tmp_path: Path) -> None:
    ca_dir, out = tmp_path / "ca", tmp_path / "out"
    assert main(["certs", "ca", "--out", str(ca_dir)]) == 0
    assert (
        main(
            [
                "certs",
                "issue",
                "--ca",
                str(ca_dir),
                "--name",
                "broker-1",
                "--host",
                "127.0.0.1",
                "--host",
                "localhost",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert _mode(ca_dir / "ca.key") == 0o600
    assert _mode(out / "broker-1.key") == 0o600
    assert _mode(out / "broker-1.pem") == 0o644
    cert = x509.load_pem_x509_certificate((out / "broker-1.pem").read_bytes())
    assert "CN=broker-1" in cert.subject.rfc4514_string()


def test_certs_refuses_to_overwrite_without_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["certs", "ca", "--out", str(tmp_path)]) == 0
    before = (tmp_path / "ca.key").read_bytes()
    assert main(["certs", "ca", "--out", str(tmp_path)]) == 2
    assert "exists; pass --force" in capsys.readouterr().err
    assert (tmp_path / "ca.key").read_bytes() == before
    assert main(["certs", "ca", "--out", str(tmp_path), "--force"]) == 0
    assert (tmp_path / "ca.key").read_bytes() != before


def test_certs_issue_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["certs", "issue", "--ca", str(tmp_path / "none"), "--name", "b", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("logferry certs issue: error: ") and "logferry certs ca" in err
    assert (
        main(["certs", "issue", "--ca", str(tmp_path), "--name", "b", "--host", "no way", "--out", str(tmp_path)]) == 2
    )
    assert "--host 'no way'" in capsys.readouterr().err


def test_a_directory_that_cannot_be_made_is_a_runtime_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("not a directory")
    assert main(["certs", "ca", "--out", str(tmp_path / "file" / "ca")]) == 1
    assert capsys.readouterr().err.startswith("logferry certs ca: error: ")
