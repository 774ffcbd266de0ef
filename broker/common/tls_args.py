"""The TLS and SASL options of every command that talks to brokers (``topic``,
``produce``, ``consume``, ``group``): the command-line form of the shared ``[tls]`` and
``[sasl]`` sections.

``--sasl-user NAME`` authenticates with SCRAM (``--sasl-mechanism``, SCRAM-SHA-512 by
default); the password comes from ``--sasl-password-file FILE`` or the environment
variable named by ``--sasl-password-env NAME``, never from the command line itself
(other users see a command line in ``ps``).

``--tls-ca FILE`` turns TLS on and trusts that CA; ``--tls`` alone turns it on with the
system's CAs; ``--tls-cert``/``--tls-key`` add a client certificate (mutual TLS);
``--tls-server-hostname`` checks the brokers' certificates against that name instead of
the address dialled. They go through the same validation as a config file's ``[tls]``
(:func:`broker.common.tls.tls_from_table`), so an unreadable file is a usage error
(exit 2) naming the option and the file.

Why in broker.common: plugins (``logferry console``) may import only ``broker.client``
and ``broker.common``, and take the same options.
"""

from __future__ import annotations

import argparse

from broker.common.config import Validator
from broker.common.errors import ConfigError
from broker.common.sasl import DEFAULT_MECHANISM, MECHANISMS, SaslCredentials, sasl_from_table
from broker.common.tls import TlsConfig, tls_from_table

OPTIONS = {
    "ca_file": "--tls-ca",
    "cert_file": "--tls-cert",
    "key_file": "--tls-key",
    "server_hostname": "--tls-server-hostname",
}
"""``[tls]`` key -> option."""


def add_tls_args(parser: argparse.ArgumentParser) -> None:
    """Add the TLS options to a command's parser."""
    group = parser.add_argument_group("TLS (docs/security.md)")
    group.add_argument(
        "--tls", action="store_true", help="connect with TLS, trusting the system's CAs (implied by --tls-ca)"
    )
    group.add_argument("--tls-ca", metavar="FILE", help="CA certificate (PEM) to trust")
    group.add_argument("--tls-cert", metavar="FILE", help="client certificate (PEM) for mutual TLS, with --tls-key")
    group.add_argument("--tls-key", metavar="FILE", help="the client certificate's key (PEM)")
    group.add_argument(
        "--tls-server-hostname", metavar="NAME", help="check the brokers' certificates against NAME, not the address"
    )


SASL_OPTIONS = {
    "username": "--sasl-user",
    "password_file": "--sasl-password-file",
    "password_env": "--sasl-password-env",
    "mechanism": "--sasl-mechanism",
}
"""``[sasl]`` key -> option."""


def add_sasl_args(parser: argparse.ArgumentParser) -> None:
    """Add the SASL options to a command's parser."""
    group = parser.add_argument_group("SASL SCRAM (docs/security.md)")
    group.add_argument("--sasl-user", metavar="NAME", help="authenticate as this user")
    group.add_argument("--sasl-password-file", metavar="FILE", help="read the password from FILE (its first line)")
    group.add_argument("--sasl-password-env", metavar="NAME", help="read the password from environment variable NAME")
    group.add_argument(
        "--sasl-mechanism", choices=MECHANISMS, default=None, help=f"SCRAM mechanism (default: {DEFAULT_MECHANISM})"
    )


def _sasl_error(key: str, problem: str, file: str) -> ConfigError:
    option = SASL_OPTIONS.get(key, key)
    return ConfigError(f"{option}: {problem}", key=option)


def sasl_from_args(args: argparse.Namespace) -> SaslCredentials | None:
    """The options as :class:`SaslCredentials` (``None`` when none is given)."""
    table = {key: getattr(args, option[2:].replace("-", "_"), None) for key, option in SASL_OPTIONS.items()}
    table = {k: v for k, v in table.items() if v}
    if not table:
        return None
    if "username" not in table:
        raise ConfigError("--sasl-user: missing (the password options need a user name)")
    if "password_file" not in table and "password_env" not in table:
        raise ConfigError(
            "--sasl-password-file or --sasl-password-env: give one (a password is never taken from the command line)"
        )
    return sasl_from_table(Validator(error=_sasl_error), table, where="")


def _error(key: str, problem: str, file: str) -> ConfigError:
    option = OPTIONS.get(key, key)
    return ConfigError(f"{option}: {problem}", key=option)


def tls_from_args(args: argparse.Namespace) -> TlsConfig | None:
    """The options as a :class:`TlsConfig` (``None`` when none is given)."""
    table: dict[str, object] = {
        key: getattr(args, option[2:].replace("-", "_"))
        for key, option in OPTIONS.items()
        if getattr(args, option[2:].replace("-", "_"), None)
    }
    if not table and not getattr(args, "tls", False):
        return None
    table["enabled"] = True
    return tls_from_table(Validator(error=_error), table, where="")


__all__ = ["add_sasl_args", "add_tls_args", "sasl_from_args", "tls_from_args"]
