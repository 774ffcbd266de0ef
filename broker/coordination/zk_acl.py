"""Which ZooKeeper ACL each of the cluster's znodes carries, and a kazoo client that
applies it to every znode it creates.

The policy (docs/security.md, "ZooKeeper"), for a cluster whose brokers and admin tools
share one digest identity, the *owner*:

- **public** (the world may READ, the owner has ALL): the chroot itself, ``/brokers``,
  ``/brokers/ids/**`` (broker registrations) and ``/brokers/topics/**`` (replica
  assignments, partition states): what a client needs to find brokers and partitions;
- **/consumers/**** (groups: members, owners, offsets): the owner and the
  ``consumer_ids`` (the identities clients that commit offsets log in as) have ALL,
  the world nothing;
- **everything else** (``/acls``, ``/controller``, ``/controller_epoch``, ``/admin``,
  credentials, anything added later): the owner only. Private is the default, so a
  new path is never public by accident.

A client that is not a broker does not know the owner: it copies the ACL it finds on
``/consumers`` for what it creates below it (read once at connect), so nodes a group
member creates stay writable by the brokers, the admins and the other members.

:func:`acls_for` is pure (unit tested); :class:`AclKazooClient` is kazoo's client with
``create``, ``ensure_path`` and transactions taking the ACL from the policy when the
caller gives none.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kazoo.client import KazooClient, TransactionRequest
from kazoo.security import ACL, Id, Permissions

CONSUMERS = "/consumers"
PUBLIC_TREES = ("/brokers/ids", "/brokers/topics")
"""Subtrees the world may read (besides the chroot and ``/brokers`` themselves)."""
PUBLIC_NODES = ("/", "/brokers")

WORLD_READ = ACL(Permissions.READ, Id("world", "anyone"))


def digest_acl(digest: str, perms: int = Permissions.ALL) -> ACL:
    """An ACL entry for the digest id ``user:hash``."""
    return ACL(perms, Id("digest", digest))


def _under(path: str, tree: str) -> bool:
    return path == tree or path.startswith(tree + "/")


def is_public(path: str) -> bool:
    """Whether the world may read ``path`` (relative to the chroot)."""
    return path in PUBLIC_NODES or any(_under(path, tree) for tree in PUBLIC_TREES)


@dataclass(frozen=True)
class AclPolicy:
    """The ACLs one secured process gives what it creates.

    ``owner``: the digest id of the brokers and admins. ``consumer_ids``: digest ids
    given ALL on ``/consumers/**``. ``consumers_acl``: the ACL read from ``/consumers``
    by a process that does not know the owner (a group client); it wins for that subtree.
    """

    owner: str
    consumer_ids: tuple[str, ...] = ()
    consumers_acl: tuple[ACL, ...] | None = None
    group_acls: dict[str, tuple[ACL, ...]] = field(default_factory=dict, compare=False)
    """Per group, the ACL its znodes carry in a cluster with group ACLs
    (:mod:`broker.coordination.group_acl`), learnt from the group node's data before a
    member creates anything below it; it wins over the rest for that group's subtree."""

    def acls_for(self, path: str) -> list[ACL]:
        """The ACL list of the znode at ``path`` (relative to the chroot)."""
        if self.group_acls and path.startswith(CONSUMERS + "/"):
            name = path[len(CONSUMERS) + 1 :].partition("/")[0]
            acl = self.group_acls.get(name)
            if acl is not None:
                return list(acl)
        return acls_for(path, self.owner, self.consumer_ids, self.consumers_acl)


def acls_for(
    path: str, owner: str, consumer_ids: Sequence[str] = (), consumers_acl: Sequence[ACL] | None = None
) -> list[ACL]:
    """The ACL list of the znode at ``path`` (relative to the chroot); see the module."""
    path = "/" + path.strip("/") if path not in ("", "/") else "/"
    mine = digest_acl(owner)
    if is_public(path):
        return [WORLD_READ, mine]
    if _under(path, CONSUMERS):
        if consumers_acl:
            return list(consumers_acl)
        return [mine] + [digest_acl(c) for c in consumer_ids if c != owner]
    return [mine]


def is_open(acl: Sequence[ACL]) -> bool:
    """Whether anyone unauthenticated may change the znode (a write, create or delete)."""
    writes = Permissions.WRITE | Permissions.CREATE | Permissions.DELETE | Permissions.ADMIN
    return any(a.id.scheme == "world" and a.perms & writes for a in acl)


class _AclTransaction(TransactionRequest):  # type: ignore[misc]
    def __init__(self, client: AclKazooClient) -> None:
        super().__init__(client)
        self._policy = client.acl_policy

    def create(
        self, path: str, value: bytes = b"", acl: Any = None, ephemeral: bool = False, sequence: bool = False
    ) -> None:
        super().create(path, value, acl if acl is not None else self._policy.acls_for(path), ephemeral, sequence)


class AclKazooClient(KazooClient):  # type: ignore[misc]
    """kazoo's client, creating every znode with :attr:`acl_policy`'s ACL for its path
    unless the caller names one."""

    def __init__(self, *args: Any, acl_policy: AclPolicy, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.acl_policy = acl_policy

    def create_async(self, path: str, value: bytes = b"", acl: Any = None, *args: Any, **kwargs: Any) -> Any:
        if acl is None:
            acl = self.acl_policy.acls_for(path.rstrip("/") or "/")
        return super().create_async(path, value, acl, *args, **kwargs)

    def transaction(self) -> TransactionRequest:
        return _AclTransaction(self)


def apply_acls(client: KazooClient, policy: AclPolicy, root: str = "/", skip: str | None = None) -> tuple[int, int]:
    """Set the policy's ACL on ``root`` and every znode below it (``logferry zk secure``).

    Idempotent: a znode that already carries its ACL is left alone. Returns
    ``(znodes seen, znodes changed)``. Ephemeral znodes (broker registrations, group
    members) are set too; their owner recreates them with the policy's ACL anyway.
    Needs ADMIN on each znode: an open one (world ALL) or one the owner has ALL on.
    ``skip``: a subtree left alone (``/consumers`` when group ACLs decide it).
    """
    from kazoo.exceptions import NoNodeError

    seen = changed = 0
    pending = [root]
    while pending:
        path = pending.pop()
        if skip is not None and _under(path, skip):
            continue
        try:
            current, _ = client.get_acls(path)
            wanted = policy.acls_for(path)
            if sorted(map(_acl_key, current)) != sorted(map(_acl_key, wanted)):
                client.set_acls(path, wanted)
                changed += 1
            seen += 1
            children = client.get_children(path)
        except NoNodeError:
            continue  # gone meanwhile (an ephemeral)
        base = path.rstrip("/")
        pending.extend(f"{base}/{c}" for c in children if not (base == "" and c == "zookeeper"))
    return seen, changed


def _acl_key(acl: ACL) -> tuple[int, str, str]:
    return (int(acl.perms), str(acl.id.scheme), str(acl.id.id))


__all__ = [
    "AclKazooClient",
    "apply_acls",
    "AclPolicy",
    "CONSUMERS",
    "PUBLIC_TREES",
    "WORLD_READ",
    "acls_for",
    "digest_acl",
    "is_open",
    "is_public",
]
