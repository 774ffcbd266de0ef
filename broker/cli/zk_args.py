"""The ZooKeeper login and TLS options of every command that reaches ZooKeeper: the
command-line form of the shared ``[zookeeper]`` section.

``--zk-user NAME`` with ``--zk-password-file FILE`` or ``--zk-password-env VAR`` (never
the password itself: a command line is visible to every user of the host), and
``--zk-tls-ca FILE`` (or ``--zk-tls`` for the system's CAs), ``--zk-tls-cert``,
``--zk-tls-key`` for TLS to ZooKeeper's ``secureClientPort``. They go through the same
validation as a config file's ``[zookeeper]``
(:func:`broker.common.zk_security.zookeeper_from_table`), so a bad file is a usage
error (exit 2) naming the option. ``$LOGFERRY_ZK_USER``,
``$LOGFERRY_ZK_PASSWORD_FILE`` and ``$LOGFERRY_ZK_TLS_CA`` stand in for the options.
"""

from __future__ import annotations

import argparse
import os

from broker.common.config import Validator
from broker.common.errors import ConfigError
from broker.common.zk_security import ZkSecurity, with_security, zookeeper_from_table

OPTIONS = {"user": "--zk-user", "password_file": "--zk-password-file", "password_env": "--zk-password-env"}
TLS_OPTIONS = {"ca_file": "--zk-tls-ca", "cert_file": "--zk-tls-cert", "key_file": "--zk-tls-key"}
ENV = {
    "--zk-user": "LOGFERRY_ZK_USER",
    "--zk-password-file": "LOGFERRY_ZK_PASSWORD_FILE",
    "--zk-tls-ca": "LOGFERRY_ZK_TLS_CA",
}
"""Environment variables that stand in for options not given."""


def add_zk_args(parser: argparse.ArgumentParser) -> None:
    """Add the ZooKeeper login and TLS options to a command's parser."""
    group = parser.add_argument_group("ZooKeeper login and TLS (docs/security.md)")
    group.add_argument(
        "--zk-user", metavar="NAME", help="log in to ZooKeeper as this digest user (with a password option)"
    )
    group.add_argument("--zk-password-file", metavar="FILE", help="the ZooKeeper password: the first line of FILE")
    group.add_argument("--zk-password-env", metavar="VAR", help="the ZooKeeper password: the environment variable VAR")
    group.add_argument(
        "--zk-tls", action="store_true", help="TLS to ZooKeeper, trusting the system's CAs (implied by --zk-tls-ca)"
    )
    group.add_argument("--zk-tls-ca", metavar="FILE", help="CA certificate (PEM) ZooKeeper's is checked against")
    group.add_argument("--zk-tls-cert", metavar="FILE", help="client certificate (PEM) for ZooKeeper")
    group.add_argument("--zk-tls-key", metavar="FILE", help="the client certificate's key (PEM)")


def _value(args: argparse.Namespace, option: str) -> str | None:
    value = getattr(args, option[2:].replace("-", "_"), None)
    if value is None and option in ENV:
        value = os.environ.get(ENV[option]) or None
    return value


def _error(key: str, problem: str, file: str) -> ConfigError:
    last = key.rpartition(".")[2]
    option = {**OPTIONS, **TLS_OPTIONS}.get(last, key)
    return ConfigError(f"{option}: {problem}", key=option)


def zk_security_from_args(args: argparse.Namespace) -> ZkSecurity | None:
    """The options as a :class:`ZkSecurity` (None when none is given)."""
    table: dict[str, object] = {key: v for key, option in OPTIONS.items() if (v := _value(args, option)) is not None}
    tls: dict[str, object] = {key: v for key, option in TLS_OPTIONS.items() if (v := _value(args, option)) is not None}
    if tls or getattr(args, "zk_tls", False):
        table["tls"] = {**tls, "enabled": True}
    return zookeeper_from_table(Validator(error=_error), table, where="")


def zk_target(args: argparse.Namespace, connect: str) -> str:
    """``connect`` carrying the login and TLS the options name (as is without them)."""
    return with_security(connect, zk_security_from_args(args))


__all__ = ["add_zk_args", "zk_security_from_args", "zk_target"]
