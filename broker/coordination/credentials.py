"""SCRAM credentials in ZooKeeper: salted and hashed, never the password.

One persistent znode per user under the cluster's chroot::

    /config/users/<user>   {"SCRAM-SHA-256": {"salt", "stored_key", "server_key", "iterations"},
                            "SCRAM-SHA-512": {...}}

(bytes base64-encoded, JSON like every logferry znode). ``stored_key`` and
``server_key`` are what RFC 5802 has the server keep: they let a broker check a
client's proof and prove itself to the client, but neither is the password nor lets
anyone log in as the user (they still must be kept from readers: see
docs/security.md, "What it does not cover"). Written by ``logferry user``, read by each
broker when a client authenticates (:class:`CredentialStore`, cached briefly there).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

from kazoo.exceptions import NodeExistsError, NoNodeError

from broker.common.errors import ConfigError
from broker.common.sasl import MECHANISMS
from broker.coordination import zk

USERS = "/config/users"
DEFAULT_ITERATIONS = 8192
"""PBKDF2 rounds of a new credential (RFC 7677 asks for at least 4096; the client pays
them once per connection, the broker never)."""
MAX_ITERATIONS = 1_000_000

USER_NAME_PATTERN = r"[A-Za-z0-9._@-]{1,128}"
_USER_RE = re.compile(USER_NAME_PATTERN)


class ScramCredential(NamedTuple):
    """What a broker keeps of one user's password for one mechanism (RFC 5802)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def validate_user_name(name: object) -> str:
    """A user name: 1-128 characters from A-Z a-z 0-9 . _ @ - (a znode name, and no
    SCRAM escaping surprises); ConfigError otherwise."""
    if not isinstance(name, str) or not _USER_RE.fullmatch(name) or name in (".", ".."):
        raise ConfigError(f"user name {name!r} must be 1-128 characters from A-Z a-z 0-9 . _ @ -")
    return name


def user_path(name: str) -> str:
    """The znode of one user's credentials."""
    return f"{USERS}/{validate_user_name(name)}"


def make_credentials(
    password: str, mechanisms: tuple[str, ...] = MECHANISMS, iterations: int = DEFAULT_ITERATIONS
) -> dict[str, ScramCredential]:
    """Salt and hash ``password`` for each mechanism (a fresh random salt each)."""
    # scramp (and asn1crypto) costs ~35 ms of start: only `logferry user` and tests make credentials
    from scramp import ScramMechanism

    if not 4096 <= iterations <= MAX_ITERATIONS:
        raise ConfigError(f"iterations must be from 4096 to {MAX_ITERATIONS}, got {iterations}")
    out = {}
    for mechanism in mechanisms:
        salt, stored_key, server_key, rounds = ScramMechanism(mechanism).make_auth_info(
            password, iteration_count=iterations
        )
        out[mechanism] = ScramCredential(salt, stored_key, server_key, rounds)
    return out


def encode_credentials(credentials: Mapping[str, ScramCredential]) -> bytes:
    """A user znode's payload."""
    return zk.encode(
        {
            mechanism: {
                "salt": _b64(c.salt),
                "stored_key": _b64(c.stored_key),
                "server_key": _b64(c.server_key),
                "iterations": c.iterations,
            }
            for mechanism, c in credentials.items()
        }
    )


def decode_credentials(raw: bytes | None) -> dict[str, ScramCredential]:
    """A user znode's payload back into credentials; entries that do not parse are left
    out (that mechanism then fails like a wrong password)."""
    out = {}
    for mechanism, entry in zk.decode(raw).items():
        if mechanism not in MECHANISMS or not isinstance(entry, dict):
            continue
        try:
            out[mechanism] = ScramCredential(
                base64.b64decode(entry["salt"], validate=True),
                base64.b64decode(entry["stored_key"], validate=True),
                base64.b64decode(entry["server_key"], validate=True),
                int(entry["iterations"]),
            )
        except (KeyError, TypeError, ValueError):
            continue
    return out


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


class CredentialStore:
    """Users and their credentials in one cluster's ZooKeeper (blocking kazoo calls)."""

    def __init__(self, client: Any):
        self.client = client

    def put(self, name: str, credentials: Mapping[str, ScramCredential], replace: bool = False) -> bool:
        """Write a user's credentials; returns False when the user exists and not
        ``replace``."""
        path = user_path(name)
        data = encode_credentials(credentials)
        try:
            self.client.create(path, data, makepath=True)
            return True
        except NodeExistsError:
            if not replace:
                return False
        self.client.set(path, data)
        return True

    def delete(self, name: str) -> bool:
        """Remove a user; False when there was none."""
        try:
            self.client.delete(user_path(name))
            return True
        except NoNodeError:
            return False

    def get(self, name: str) -> dict[str, ScramCredential] | None:
        """A user's credentials, None for an unknown user."""
        try:
            raw, _ = self.client.get(user_path(name))
        except NoNodeError:
            return None
        return decode_credentials(raw)

    def users(self) -> dict[str, list[str]]:
        """Every user with the mechanisms it has credentials for (no secrets)."""
        try:
            names = sorted(self.client.get_children(USERS))
        except NoNodeError:
            return {}
        out = {}
        for name in names:
            try:
                raw, _ = self.client.get(f"{USERS}/{name}")
            except NoNodeError:
                continue
            out[name] = sorted(decode_credentials(raw))
        return out


__all__ = [
    "CredentialStore",
    "DEFAULT_ITERATIONS",
    "ScramCredential",
    "USERS",
    "decode_credentials",
    "encode_credentials",
    "make_credentials",
    "user_path",
    "validate_user_name",
]
