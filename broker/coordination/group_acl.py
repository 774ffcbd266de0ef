"""Per-group ZooKeeper ACLs derived from the cluster's logferry group ACLs.

A consumer group lives in ZooKeeper (``/consumers/<group>/{ids,owners,offsets}``) and its
members write it directly, so the broker's authorizer never sees a commit. What keeps a
login from rewriting another group's offsets is the ZooKeeper ACL of that group's znodes,
and this module derives it from the ACLs ``logferry acl`` stores (docs/security.md,
"Consumer groups and their offsets"):

- a consumer id (a ZooKeeper digest id ``name:hash``, listed in the brokers'
  ``consumer_ids``) *is* the principal ``User:<name>``;
- the group's znodes give the owner ALL, each consumer id allowed ``consume`` on the
  group READ|WRITE|CREATE|DELETE (commit, register, claim), each one allowed only
  ``describe`` READ (lag, ``group describe``), everyone else nothing. Deny wins and
  ``*`` principals and groups count, exactly as the broker decides
  (:meth:`broker.common.acl.AclSet.authorize`); nobody but the owner gets ADMIN, so no
  member can change who else may touch its group;
- ``/consumers`` itself: the owner ALL, every consumer id READ (list groups), and CREATE
  for those allowed ``consume`` on every group (``--group '*'``): only they may start a
  group that no ACL names; the owner creates the node of every group an ACL names, so
  nobody can take such a group by creating it first.

The derived ACL is also written as the JSON data of each group node (and, for groups
no ACL names yet, of ``/consumers``): ZooKeeper masks the ids of an ACL for a reader
without ADMIN, so this is how a member learns the ACL to give the znodes it creates
below (its registration, its ownerships, a first offset).

*Group mode* is on once the store holds any group ACL; without one, ``/consumers/**``
keep the shared ACL of :mod:`broker.coordination.zk_acl` (every consumer id ALL), as
before. :func:`group_zk_acl` and friends are pure (unit tested); :func:`apply_group_acls`
(run by ``logferry acl add|remove`` and ``logferry zk secure`` as the owner) sets them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.security import ACL, Id, Permissions

from broker.common.acl import WILDCARD, Acl, AclSet, Operation, ResourceType, group
from broker.coordination.zk_acl import CONSUMERS, AclPolicy, apply_acls, digest_acl

MEMBER: int = Permissions.READ | Permissions.WRITE | Permissions.CREATE | Permissions.DELETE
"""What ``consume`` on a group allows in ZooKeeper: everything but changing the ACL."""
READER: int = Permissions.READ
"""What ``describe`` on a group allows: reading members, owners and offsets."""

DATA_KEY = "zk_acl"
"""Key of a group node's JSON data: the ACL its subtree carries."""
NEW_GROUP_KEY = "new_group_zk_acl"
"""Key of ``/consumers``' JSON data: the ACL of a group that no ACL names."""

_UNNAMED = "\x00"
"""A group name no ACL can hold: asking about it asks what ``--group '*'`` allows."""


def principal_of(consumer_id: str) -> str:
    """The logferry principal of a ZooKeeper digest id: ``mirror:hash`` -> ``User:mirror``."""
    return "User:" + consumer_id.partition(":")[0]


def group_mode(acls: Iterable[Acl]) -> bool:
    """Whether group ACLs decide who may touch each group (any group ACL stored)."""
    return any(a.resource.type is ResourceType.GROUP for a in acls)


def _perms(acl_set: AclSet, consumer_id: str, name: str) -> int:
    who = principal_of(consumer_id)
    resource = group(name)
    if acl_set.authorize(who, Operation.CONSUME, resource).allowed:
        return MEMBER
    if acl_set.authorize(who, Operation.DESCRIBE, resource).allowed:
        return READER
    return 0


def group_zk_acl(name: str, acls: Iterable[Acl], owner: str, consumer_ids: Sequence[str]) -> list[ACL]:
    """The ZooKeeper ACL of group ``name``'s znodes (the module's rules)."""
    acl_set = AclSet(acls)
    out = [digest_acl(owner)]
    for cid in consumer_ids:
        perms = _perms(acl_set, cid, name) if cid != owner else 0
        if perms:
            out.append(digest_acl(cid, perms))
    return out


def new_group_zk_acl(acls: Iterable[Acl], owner: str, consumer_ids: Sequence[str]) -> list[ACL]:
    """The ACL of a group that no ACL names: what the ``'*'`` group ACLs give."""
    return group_zk_acl(_UNNAMED, acls, owner, consumer_ids)


def consumers_zk_acl(acls: Iterable[Acl], owner: str, consumer_ids: Sequence[str]) -> list[ACL]:
    """The ACL of ``/consumers`` in group mode: owner ALL, consumer ids READ, and CREATE
    for those who may consume every group."""
    acl_set = AclSet(acls)
    out = [digest_acl(owner)]
    for cid in consumer_ids:
        if cid == owner:
            continue
        create = acl_set.authorize(principal_of(cid), Operation.CONSUME, group(_UNNAMED)).allowed
        out.append(digest_acl(cid, READER | (Permissions.CREATE if create else 0)))
    return out


def named_groups(acls: Iterable[Acl]) -> set[str]:
    """The groups an ACL names (not ``'*'``): their nodes are the owner's to create."""
    return {a.resource.name for a in acls if a.resource.type is ResourceType.GROUP and a.resource.name != WILDCARD}


def encode_acl(acl: Sequence[ACL], key: str = DATA_KEY) -> bytes:
    """A group node's data: ``{"zk_acl": [[perms, scheme, id], ...]}``."""
    return json.dumps({key: [[int(a.perms), a.id.scheme, a.id.id] for a in acl]}, sort_keys=True).encode()


def decode_acl(raw: bytes | None, key: str = DATA_KEY) -> list[ACL] | None:
    """The ACL in a node's data, or None (no data: the cluster is not in group mode)."""
    if not raw:
        return None
    try:
        entries = json.loads(raw)[key]
        return [ACL(int(p), Id(str(s), str(i))) for p, s, i in entries]
    except (ValueError, KeyError, TypeError):
        return None


def perms_of(acl: Sequence[ACL], digest: str) -> int:
    """What the digest id ``digest`` may do on a znode carrying ``acl``."""
    perms = 0
    for entry in acl:
        if (entry.id.scheme == "digest" and entry.id.id == digest) or entry.id.scheme == "world":
            perms |= int(entry.perms)
    return perms


def _key(acl: ACL) -> tuple[int, str, str]:
    return (int(acl.perms), str(acl.id.scheme), str(acl.id.id))


def consumer_ids_on(client: Any, owner: str) -> list[str]:
    """The consumer ids ``/consumers``' ACL names (the owner reads them unmasked)."""
    try:
        acl, _ = client.get_acls(CONSUMERS)
    except NoNodeError:
        return []
    return sorted({a.id.id for a in acl if a.id.scheme == "digest" and a.id.id != owner})


def _set_tree(client: Any, root: str, acl: list[ACL]) -> tuple[int, int]:
    """Set ``acl`` on ``root`` and every znode below; ``(seen, changed)``."""
    seen = changed = 0
    pending = [root]
    wanted = sorted(map(_key, acl))
    while pending:
        path = pending.pop()
        try:
            current, _ = client.get_acls(path)
            if sorted(map(_key, current)) != wanted:
                client.set_acls(path, acl)
                changed += 1
            seen += 1
            pending.extend(f"{path}/{c}" for c in client.get_children(path))
        except NoNodeError:
            continue
    return seen, changed


def _set_data(client: Any, path: str, data: bytes) -> bool:
    try:
        current, _ = client.get(path)
    except NoNodeError:
        return False
    if current == data:
        return False
    client.set(path, data)
    return True


def apply_group_acls(
    client: Any, owner: str, acls: Sequence[Acl], consumer_ids: Sequence[str] | None = None
) -> tuple[int, int]:
    """Give every group's znodes (and ``/consumers``) the ACL ``acls`` derive for them.

    Run as the owner (``logferry acl add|remove``, ``logferry zk secure``): it needs ADMIN
    on every znode of ``/consumers``. ``consumer_ids`` default to those ``/consumers``
    names now. Creates the node of every group an ACL names (so nobody can take it
    first). Without any group ACL, puts back the shared ACL (every consumer id ALL) and
    drops the published ACLs. Idempotent; returns ``(znodes seen, znodes changed)``.
    """
    ids = sorted(consumer_ids) if consumer_ids is not None else consumer_ids_on(client, owner)
    if not group_mode(acls):
        return _leave_group_mode(client, owner, ids)
    seen = changed = 0
    client.ensure_path(CONSUMERS)
    top = consumers_zk_acl(acls, owner, ids)
    current, _ = client.get_acls(CONSUMERS)
    if sorted(map(_key, current)) != sorted(map(_key, top)):
        client.set_acls(CONSUMERS, top)
        changed += 1
    changed += _set_data(client, CONSUMERS, encode_acl(new_group_zk_acl(acls, owner, ids), NEW_GROUP_KEY))
    seen += 1
    for name in sorted(named_groups(acls)):
        try:
            client.create(f"{CONSUMERS}/{name}", b"", acl=group_zk_acl(name, acls, owner, ids))
            changed += 1
        except NodeExistsError:
            pass
    for name in sorted(client.get_children(CONSUMERS)):
        acl = group_zk_acl(name, acls, owner, ids)
        path = f"{CONSUMERS}/{name}"
        # the data first: a member creating a znode meanwhile reads the new ACL
        changed += _set_data(client, path, encode_acl(acl))
        s, c = _set_tree(client, path, acl)
        seen, changed = seen + s, changed + c
    return seen, changed


def secure_cluster(client: Any, owner: str, consumer_ids: Sequence[str]) -> tuple[int, int]:
    """``logferry zk secure``'s work, as the owner: the :mod:`~broker.coordination.zk_acl`
    policy on every znode under the chroot and, with group ACLs stored, the per-group ACLs
    derived from them on ``/consumers/**`` instead. Idempotent; ``(seen, changed)``."""
    from broker.coordination.acl_store import AclStore

    policy = AclPolicy(owner, tuple(consumer_ids))
    acls = AclStore(client).all()
    seen, changed = apply_acls(client, policy, skip=CONSUMERS if group_mode(acls) else None)
    s, c = apply_group_acls(client, owner, acls, consumer_ids)
    return seen + s, changed + c


def _leave_group_mode(client: Any, owner: str, ids: Sequence[str]) -> tuple[int, int]:
    """No group ACL: the shared ACL of zk_acl on ``/consumers/**``, no published ACLs."""
    try:
        raw, _ = client.get(CONSUMERS)
    except NoNodeError:
        return 0, 0
    if decode_acl(raw, NEW_GROUP_KEY) is None:
        return 0, 0  # never was in group mode: zk secure's own pass covers it
    changed = int(_set_data(client, CONSUMERS, b""))
    for name in client.get_children(CONSUMERS):
        path = f"{CONSUMERS}/{name}"
        try:
            if decode_acl(client.get(path)[0]) is not None:
                changed += _set_data(client, path, b"")
        except NoNodeError:
            continue
    seen, set_ = apply_acls(client, AclPolicy(owner, tuple(ids)), CONSUMERS)
    return seen, changed + set_


__all__ = [
    "DATA_KEY",
    "MEMBER",
    "NEW_GROUP_KEY",
    "READER",
    "apply_group_acls",
    "consumer_ids_on",
    "consumers_zk_acl",
    "decode_acl",
    "encode_acl",
    "group_mode",
    "group_zk_acl",
    "named_groups",
    "new_group_zk_acl",
    "perms_of",
    "principal_of",
    "secure_cluster",
]
