"""The TLS options of every command that talks to brokers (``topic``, ``produce``,
``consume``, ``group``): the command-line form of the shared ``[tls]`` section.

``--tls-ca FILE`` turns TLS on and trusts that CA; ``--tls`` alone turns it on with the
system's CAs; ``--tls-cert``/``--tls-key`` add a client certificate (mutual TLS);
``--tls-server-hostname`` checks the brokers' certificates against that name instead of
the address dialled. They go through the same validation as a config file's ``[tls]``
(:func:`broker.common.tls.tls_from_table`), so an unreadable file is a usage error
(exit 2) naming the option and the file.
"""

from __future__ import annotations

import argparse

from broker.common.config import Validator
from broker.common.errors import ConfigError
from broker.common.tls import TlsConfig, tls_from_table

OPTIONS = {"ca_file": "--tls-ca", "cert_file": "--tls-cert", "key_file": "--tls-key",
           "server_hostname": "--tls-server-hostname"}
"""``[tls]`` key -> option."""


def add_tls_args(parser: argparse.ArgumentParser) -> None:
    """Add the TLS options to a command's parser."""
    group = parser.add_argument_group("TLS (docs/security.md)")
    group.add_argument("--tls", action="store_true",
                       help="connect with TLS, trusting the system's CAs (implied by --tls-ca)")
    group.add_argument("--tls-ca", metavar="FILE", help="CA certificate (PEM) to trust")
    group.add_argument("--tls-cert", metavar="FILE",
                       help="client certificate (PEM) for mutual TLS, with --tls-key")
    group.add_argument("--tls-key", metavar="FILE", help="the client certificate's key (PEM)")
    group.add_argument("--tls-server-hostname", metavar="NAME",
                       help="check the brokers' certificates against NAME, not the address")


def _error(key: str, problem: str, file: str) -> ConfigError:
    option = OPTIONS.get(key, key)
    return ConfigError(f"{option}: {problem}", key=option)


def tls_from_args(args: argparse.Namespace) -> TlsConfig | None:
    """The options as a :class:`TlsConfig` (``None`` when none is given)."""
    table: dict[str, object] = {key: getattr(args, option[2:].replace("-", "_"))
                                for key, option in OPTIONS.items()
                                if getattr(args, option[2:].replace("-", "_"), None)}
    if not table and not getattr(args, "tls", False):
        return None
    table["enabled"] = True
    return tls_from_table(Validator(error=_error), table, where="")


__all__ = ["add_tls_args", "tls_from_args"]
