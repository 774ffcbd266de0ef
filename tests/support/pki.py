"""A throwaway private CA for TLS tests, made with ``broker.common.certs`` (no openssl
command needed): a CA, a broker certificate for 127.0.0.1 and localhost, a client
certificate, and a second CA that nobody trusts.

A pytest plugin too (listed in ``tests/conftest.py``): the ``pki`` fixture is one such
set of files for the whole session (per worker), read-only for the tests that use it;
a test that needs its own calls :func:`make_pki`."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pytest

from broker.common import certs


class Pki(NamedTuple):
    """Paths of the PEM files."""

    ca: Path
    broker_cert: Path
    broker_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path
    """A CA that signed nothing here: trusting only it must fail verification."""
    other_cert: Path
    other_key: Path
    """A certificate for 127.0.0.1 signed by ``other_ca`` (an untrusted broker or client)."""


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    ca = certs.make_ca("test CA")
    other = certs.make_ca("stranger CA")
    broker = certs.issue(ca.cert_pem, ca.key_pem, "broker", ["127.0.0.1", "localhost"])
    client = certs.issue(ca.cert_pem, ca.key_pem, "client", [])
    stranger = certs.issue(other.cert_pem, other.key_pem, "stranger", ["127.0.0.1"])
    files = {
        "ca.pem": ca.cert_pem,
        "broker.pem": broker.cert_pem,
        "broker.key": broker.key_pem,
        "client.pem": client.cert_pem,
        "client.key": client.key_pem,
        "other-ca.pem": other.cert_pem,
        "stranger.pem": stranger.cert_pem,
        "stranger.key": stranger.key_pem,
    }
    for name, data in files.items():
        (directory / name).write_bytes(data)
        if name.endswith(".key"):
            (directory / name).chmod(0o600)
    d = directory
    return Pki(
        d / "ca.pem",
        d / "broker.pem",
        d / "broker.key",
        d / "client.pem",
        d / "client.key",
        d / "other-ca.pem",
        d / "stranger.pem",
        d / "stranger.key",
    )


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """The session's certificates (see the module docstring)."""
    return make_pki(tmp_path_factory.mktemp("pki"))
