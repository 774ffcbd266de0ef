"""Client credentials for SASL SCRAM, and the ``[sasl]`` config section that gives them.

One table, the same keys in every component that connects to brokers (the agent, the
mirror per cluster, a broker for its followers' fetches, the CLI's options):

.. code-block:: toml

    [sasl]
    username = "agent"
    mechanism = "SCRAM-SHA-512"               # or SCRAM-SHA-256
    password_file = "secrets/agent.password"  # one of password_file, password_env, password
    # password_env = "LOGFERRY_AGENT_PASSWORD"
    # password = "..."                        # inline: the config file then holds a secret

A password never comes from a command line (other users see it in ``ps``) and is never
logged (:class:`SaslCredentials` keeps it out of its repr). A file holding a secret (a
password file, or a config file with ``password``) that group or others may read
draws a warning at load: :func:`secret_file_warning`.

Why here, in broker.common: the agent and the mirror may import only
``broker.client`` and ``broker.common``, and each of them reads this section.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker.common.config import NONEMPTY_STR, Validator, fields, one_of
from broker.common.errors import ConfigError

log = logging.getLogger("logferry.config")

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
"""The SASL mechanisms logferry speaks, weakest first."""
DEFAULT_MECHANISM = "SCRAM-SHA-512"

SASL_FIELDS = fields(
    username=NONEMPTY_STR,
    mechanism=one_of(*MECHANISMS),
    password_file=NONEMPTY_STR,
    password_env=NONEMPTY_STR,
    password=NONEMPTY_STR,
)
"""The ``[sasl]`` table (docs/security.md, "Authentication")."""

PASSWORD_SOURCES = ("password_file", "password_env", "password")


@dataclass(frozen=True)
class SaslCredentials:
    """Who a client authenticates as: a user name, its password and the mechanism.

    Give it to any client (``Producer(..., sasl=SaslCredentials("agent", pw))``); the
    connection runs the SCRAM exchange right after connecting (and after TLS).
    """

    username: str
    password: str = field(repr=False)
    mechanism: str = DEFAULT_MECHANISM

    def __post_init__(self) -> None:
        if self.mechanism not in MECHANISMS:
            raise ConfigError(f"SASL mechanism {self.mechanism!r} is not one of {', '.join(MECHANISMS)}")
        if not self.username:
            raise ConfigError("a SASL user name must not be empty")
        if not self.password:
            raise ConfigError(f"the password of SASL user {self.username!r} is empty")


def read_password_file(path: Path) -> str:
    """The password in ``path``: its first line (a trailing newline is not part of it).
    Raises ConfigError naming the file; warns when group or others may read it."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such password file") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, not a password file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the password file ({exc})") from None
    warning = secret_file_warning(path)
    if warning:
        log.warning("%s", warning)
    password = text.splitlines()[0] if text else ""
    if not password:
        raise ConfigError(f"{path}: the password file is empty")
    return password


def password_from_env(name: str, environ: Mapping[str, str] | None = None) -> str:
    """The password in environment variable ``name`` (ConfigError when unset or empty)."""
    value = (os.environ if environ is None else environ).get(name)
    if not value:
        raise ConfigError(f"environment variable {name} (the SASL password) is not set")
    return value


def secret_file_warning(path: str | Path) -> str | None:
    """A sentence when a file holding a secret may be read by group or others (mode
    bits 077), with the fix; None when only its owner may (or it cannot be stat'ed)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if not mode & (stat.S_IRWXG | stat.S_IRWXO):
        return None
    return (
        f"{path} holds a secret but its mode is {stat.filemode(mode)} (group or others "
        f"may read it): run chmod 600 {path}"
    )


def sasl_section(
    validator: Validator, parent: Mapping[str, Any], name: str = "sasl", where: str = ""
) -> SaslCredentials | None:
    """The checked ``[name]`` table of ``parent`` as credentials (``None`` when absent)."""
    key = f"{where}.{name}" if where else name
    table = validator.table(parent, name, SASL_FIELDS, where)
    return sasl_from_table(validator, table, key)


def sasl_from_table(validator: Validator, table: Mapping[str, Any], where: str = "sasl") -> SaslCredentials | None:
    """A checked ``[sasl]`` table (see :data:`SASL_FIELDS`) as :class:`SaslCredentials`."""

    def name(k: str) -> str:
        return f"{where}.{k}" if where else k

    if not table:
        return None
    if "username" not in table:
        validator.fail(name("username"), "missing (the user to authenticate as)")
    given = [k for k in PASSWORD_SOURCES if k in table]
    if len(given) != 1:
        validator.fail(
            name("password_file"),
            f"give exactly one of password_file, password_env and password (got {', '.join(given) or 'none'})",
        )
    source = given[0]
    try:
        if source == "password_file":
            password = read_password_file(validator.path(table["password_file"]))
        elif source == "password_env":
            password = password_from_env(table["password_env"])
        else:
            password = table["password"]
            warning = secret_file_warning(validator.file) if validator.file else None
            if warning:
                log.warning("%s", warning)
        return SaslCredentials(table["username"], password, table.get("mechanism", DEFAULT_MECHANISM))
    except ConfigError as exc:
        validator.fail(name(source), str(exc))


__all__ = [
    "DEFAULT_MECHANISM",
    "MECHANISMS",
    "SASL_FIELDS",
    "SaslCredentials",
    "password_from_env",
    "read_password_file",
    "sasl_from_table",
    "sasl_section",
    "secret_file_warning",
]
