"""A secured deployment on one machine, for the demo and tests: a private CA with a
broker certificate, SCRAM users with random passwords in 0600 files, and ACLs.

The same code as ``logferry certs``, ``logferry user create`` and ``logferry acl add``
(docs/security.md), called in-process so that a demo sets up a dozen users and ACLs in
well under a second. Needs the ``certs`` extra (``cryptography``).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from broker.common.acl import Resource, ResourceType, make_acl
from broker.coordination import zk
from broker.coordination.acl_store import AclStore
from broker.coordination.credentials import CredentialStore, make_credentials

TEST_ITERATIONS = 4096
"""PBKDF2 iterations of the users made here: SCRAM's minimum (RFC 7677), so that each
client's connection costs a few milliseconds less than with the CLI's default."""


@dataclass(frozen=True)
class Pki:
    """The PEM files of :func:`make_pki`."""

    ca: Path
    broker_cert: Path
    broker_key: Path


def make_pki(directory: Path, hosts: Iterable[str] = ("127.0.0.1", "localhost"), name: str = "broker") -> Pki:
    """A private CA (``ca.pem``; its key is not kept) and one broker certificate for
    ``hosts`` (key mode 0600) in ``directory``."""
    from broker.common import certs

    directory.mkdir(parents=True, exist_ok=True)
    ca = certs.make_ca("logferry demo CA")
    issued = certs.issue(ca.cert_pem, ca.key_pem, name, list(hosts))
    pki = Pki(directory / "ca.pem", directory / f"{name}.pem", directory / f"{name}.key")
    pki.ca.write_bytes(ca.cert_pem)
    pki.broker_cert.write_bytes(issued.cert_pem)
    pki.broker_key.touch(mode=0o600)
    pki.broker_key.write_bytes(issued.key_pem)
    return pki


def password_file(directory: Path, name: str) -> tuple[Path, str]:
    """A new random password in ``directory/<name>.password`` (mode 0600 from creation)."""
    directory.mkdir(parents=True, exist_ok=True)
    password = secrets.token_urlsafe(24)
    path = directory / f"{name}.password"
    path.unlink(missing_ok=True)
    path.touch(mode=0o600)
    path.write_text(password + "\n")
    return path, password


def create_users(zk_connect: str, users: dict[str, str], iterations: int = TEST_ITERATIONS) -> None:
    """Store SCRAM credentials (both mechanisms) for each ``name: password`` in the
    cluster at ``zk_connect`` (its chroot created if missing), replacing old ones."""
    client = zk.connect(zk_connect, create=True)
    try:
        store = CredentialStore(client)
        for name, password in users.items():
            store.put(name, make_credentials(password, iterations=iterations), replace=True)
    finally:
        zk.close(client)


Grant = tuple[str, str, str]
"""(principal, operation, topic): an allow ACL on one topic."""


def add_acls(zk_connect: str, grants: Iterable[Grant], groups: Iterable[Grant] = ()) -> int:
    """Allow each (principal, operation, topic) of ``grants`` and each (principal,
    operation, group) of ``groups``; returns how many ACLs were added."""
    acls = [make_acl(p, op, Resource(ResourceType.TOPIC, t)) for p, op, t in grants]
    acls += [make_acl(p, op, Resource(ResourceType.GROUP, g)) for p, op, g in groups]
    client = zk.connect(zk_connect, create=True)
    try:
        store = AclStore(client)
        return sum(1 for acl in acls if store.add(acl))
    finally:
        zk.close(client)


def make_chroot(zk_connect: str) -> None:
    """Create the cluster's chroot (and its registry paths) without a login, as a
    ZooKeeper operator does before the cluster's owner secures it: the chroot's parents
    stay open, so clusters with different owners can share them (``/logferry``)."""
    from broker.common.zk_security import security_of

    if security_of(zk_connect) is not None:
        zk_connect = str.__str__(zk_connect)
    zk.close(zk.connect(zk_connect, create=True))


def secure_zookeeper(owner: str) -> int:
    """``logferry zk secure`` in-process: ``owner`` is a connect string logged in as the
    cluster's owner (a :class:`~broker.common.zk_security.ZkTarget` carrying its
    ``consumer_ids``); every znode gets its ZooKeeper ACL, each group's derived from the
    group ACLs. Returns how many znodes changed."""
    from broker.common.zk_security import security_of
    from broker.coordination.group_acl import secure_cluster

    security = security_of(owner)
    if security is None or security.digest_id is None:
        raise ValueError("secure_zookeeper needs a connect string logged in as the owner")
    client = zk.connect(owner, create=False)
    try:
        return secure_cluster(client, security.digest_id, security.consumer_ids)[1]
    finally:
        zk.close(client)


__all__ = [
    "Grant",
    "Pki",
    "TEST_ITERATIONS",
    "add_acls",
    "create_users",
    "make_chroot",
    "make_pki",
    "password_file",
    "secure_zookeeper",
]
