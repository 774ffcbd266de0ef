"""The ``[zookeeper]`` config section: who a process is to ZooKeeper, and TLS to it.

One table, the same keys for the broker, agent, mirror (one per cluster) and loader,
and the same settings as the CLI's ``--zk-user``, ``--zk-password-file``,
``--zk-tls-ca`` ... options:

.. code-block:: toml

    [zookeeper]
    user = "logferry"                       # a digest identity (user:password)
    password_file = "secrets/zk.password"   # or password_env = "LOGFERRY_ZK_PASSWORD"
    consumer_ids = ["consumers:Zm9v..."]    # brokers/admins: identities that may commit
                                            #   offsets (`logferry zk digest` prints one)
    [zookeeper.tls]                         # the shared [tls] keys (broker.common.tls)
    enabled = true
    ca_file = "certs/ca.pem"

The password never comes from the config text or a command line: a file (its first
line, trailing newline dropped) or an environment variable. :class:`ZkSecurity` keeps
it out of its ``repr``.

Why a :class:`ZkTarget` (a ``str`` that carries its :class:`ZkSecurity`): every client
(producer, consumers, admin, group admin) and every config already passes the
cluster's connect string around as ``zk=...``; a connect string that knows how to log
in reaches :func:`broker.coordination.zk.connect`, the one place that makes ZooKeeper
clients, without a new parameter on each of them.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker.common.config import NONEMPTY_STR, STR_LIST, TABLE, Validator, fields
from broker.common.tls import TLS_FIELDS, TlsConfig, tls_from_table

ZOOKEEPER_FIELDS = fields(
    user=NONEMPTY_STR,
    password_file=NONEMPTY_STR,
    password_env=NONEMPTY_STR,
    consumer_ids=STR_LIST,
    tls=TABLE,
)
"""The ``[zookeeper]`` table (docs/security.md, "ZooKeeper")."""

_USER = re.compile(r"[A-Za-z0-9._@-]{1,128}")
_DIGEST_ID = re.compile(r"[A-Za-z0-9._@-]{1,128}:[A-Za-z0-9+/]{27}=")


@dataclass(frozen=True)
class ZkSecurity:
    """How one process connects to one ZooKeeper ensemble.

    ``user`` and ``password`` (both or neither): the digest identity the session adds
    with ``addauth``; with them the process runs *secured* and every znode it creates
    carries ACLs (:mod:`broker.coordination.zk_acl`). ``tls``: TLS to ZooKeeper's
    ``secureClientPort``. ``consumer_ids``: digest ids (``user:hash``) given read and
    write on ``/consumers`` when a broker or admin tool creates or secures it.
    """

    user: str | None = None
    password: str | None = field(default=None, repr=False)
    tls: TlsConfig | None = None
    consumer_ids: tuple[str, ...] = ()

    @property
    def authenticated(self) -> bool:
        """Whether the session logs in (so creates znodes with ACLs)."""
        return self.user is not None and self.password is not None

    @property
    def digest_id(self) -> str | None:
        """This identity as a digest ACL names it (``user:base64(sha1(user:password))``)."""
        if self.user is None or self.password is None:
            return None
        return digest_id(self.user, self.password)


def digest_id(user: str, password: str) -> str:
    """ZooKeeper's digest id of ``user:password``: what an ACL names, not the secret."""
    raw = hashlib.sha1(f"{user}:{password}".encode()).digest()
    return f"{user}:{base64.b64encode(raw).decode()}"


class ZkTarget(str):
    """A ZooKeeper connect string that carries the :class:`ZkSecurity` to use with it.

    It is a ``str`` (``"zk1:2181/logferry/live"``), so every API that takes a connect
    string takes it; :func:`broker.coordination.zk.connect` reads its ``security``.
    """

    security: ZkSecurity | None

    def __new__(cls, connect: str, security: ZkSecurity | None = None) -> ZkTarget:
        target = super().__new__(cls, connect)
        target.security = security
        return target

    def __reduce__(self) -> tuple[Any, ...]:
        return (ZkTarget, (str(self), self.security))


def security_of(connect: str) -> ZkSecurity | None:
    """The :class:`ZkSecurity` a connect string carries (None for a plain ``str``)."""
    return getattr(connect, "security", None)


def with_security(connect: str, security: ZkSecurity | None) -> str:
    """``connect`` as a :class:`ZkTarget` when there is security to carry, else as is."""
    return connect if security is None else ZkTarget(connect, security)


def zookeeper_section(
    validator: Validator,
    parent: Mapping[str, Any],
    name: str = "zookeeper",
    where: str = "",
    env: Mapping[str, str] | None = None,
) -> ZkSecurity | None:
    """The checked ``[name]`` table of ``parent`` as a :class:`ZkSecurity` (None: absent)."""
    key = f"{where}.{name}" if where else name
    table = validator.table(parent, name, ZOOKEEPER_FIELDS, where)
    return zookeeper_from_table(validator, table, key, env)


def zookeeper_from_table(
    validator: Validator, table: Mapping[str, Any], where: str = "zookeeper", env: Mapping[str, str] | None = None
) -> ZkSecurity | None:
    """A checked ``[zookeeper]`` table as a :class:`ZkSecurity`; None when it sets nothing.

    The password is read here, so a missing file or an unset variable stops the process
    at start naming the key.
    """

    def name(k: str) -> str:
        return f"{where}.{k}" if where else k

    if not table:
        return None
    user = table.get("user")
    if user is not None and not _USER.fullmatch(user):
        validator.fail(
            name("user"), f"{user!r} is not a ZooKeeper digest user name (letters, digits, '.', '_', '@', '-')"
        )
    sources = [k for k in ("password_file", "password_env") if k in table]
    if len(sources) > 1:
        validator.fail(name("password_env"), "give password_file or password_env, not both")
    if (user is None) != (not sources):
        missing = "user" if user is None else "password_file"
        validator.fail(name(missing), "missing (user and a password_file or password_env go together)")
    password = None
    if sources:
        password = _read_password(
            validator, name(sources[0]), sources[0], table[sources[0]], os.environ if env is None else env
        )
    for i, value in enumerate(table.get("consumer_ids", ())):
        if not _DIGEST_ID.fullmatch(value):
            validator.fail(
                f"{name('consumer_ids')}[{i}]",
                f"{value!r} is not a digest id "
                "user:hash (print one with `logferry zk digest --user NAME "
                "--password-file FILE`)",
            )
    tls = None
    if "tls" in table:
        tls_table = validator.check(table["tls"], TLS_FIELDS, name("tls"))
        if "server_hostname" in tls_table:
            validator.fail(
                name("tls.server_hostname"),
                "not supported toward ZooKeeper (kazoo "
                "checks the certificate against the host dialled: put that name "
                "in the connect string)",
            )
        tls = tls_from_table(validator, tls_table, name("tls"))
    return ZkSecurity(user=user, password=password, tls=tls, consumer_ids=tuple(table.get("consumer_ids", ())))


def _read_password(validator: Validator, key: str, source: str, value: str, env: Mapping[str, str]) -> str:
    if source == "password_env":
        password = env.get(value)
        if not password:
            validator.fail(key, f"environment variable {value} is not set or empty")
        return password
    path = validator.path(value)
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        validator.fail(key, f"{path}: no such file")
    except OSError as exc:
        validator.fail(key, f"{path}: cannot read it ({exc.strerror})")
    password = text.splitlines()[0] if text else ""
    if not password:
        validator.fail(key, f"{path}: is empty (the password is its first line)")
    return password


__all__ = [
    "ZOOKEEPER_FIELDS",
    "ZkSecurity",
    "ZkTarget",
    "digest_id",
    "security_of",
    "with_security",
    "zookeeper_from_table",
    "zookeeper_section",
]
