"""May this ZooKeeper login use this group? Asked once before a client touches a group.

In a cluster with group ACLs the owner publishes each group's ZooKeeper ACL as the
group node's data (:mod:`broker.coordination.group_acl`). Before a member registers,
an admin tool seeks or a reader reads offsets, :func:`check_group_access` reads it:

- the group node refuses this login (ZooKeeper NoAuth), or the published ACL does not
  give it what the operation needs (``consume``: write; ``describe``: read) ->
  :class:`~broker.common.errors.GroupAuthorizationFailedError` naming the principal
  (``User:<login>``), the operation and the group, before anything is written;
- otherwise the ACL is kept on the client's policy, so every znode it creates below
  the group (registration, ownerships, a first offset) carries the group's ACL and
  stays readable and writable by the other members, the readers and the owner.

A cluster without group ACLs publishes nothing, and nothing changes (every consumer
login may use every group, as ``/consumers``' shared ACL says). So does a client
without a ZooKeeper login: it may touch only what the world may, which for a secured
cluster is no group at all, and ZooKeeper refuses it there by itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kazoo.exceptions import NoAuthError, NoNodeError
from kazoo.recipe.watchers import DataWatch

from broker.common.acl import Operation
from broker.common.errors import GroupAuthorizationFailedError
from broker.coordination import zk
from broker.coordination.group_acl import (
    MEMBER,
    NEW_GROUP_KEY,
    READER,
    decode_acl,
    perms_of,
)
from broker.coordination.zk_acl import AclKazooClient

_NEEDS = {Operation.CONSUME: MEMBER, Operation.DESCRIBE: READER}


def refusal(client: Any, group: str, operation: Operation, why: str) -> GroupAuthorizationFailedError:
    """The error of a refused group operation: principal, operation, group, and the fix."""
    policy = getattr(client, "acl_policy", None)
    login = policy.owner.partition(":")[0] if policy is not None else None
    who = f"User:{login}" if login else "User:ANONYMOUS"
    how = f"ZooKeeper login {login!r}" if login else "a client without a ZooKeeper login"
    return GroupAuthorizationFailedError(
        f"{who} may not {operation} group {group!r} ({how}: {why}; an operator can run "
        f"`logferry acl add --principal {who} --operation {operation} --group {group}`)"
    )


def check_group_access(client: Any, group: str, operation: Operation = Operation.CONSUME) -> None:
    """Raise GroupAuthorizationFailedError if this login may not do ``operation`` on
    ``group``; else remember the group's ACL for the znodes this client creates there."""
    if not isinstance(client, AclKazooClient):
        return
    path = f"{zk.CONSUMERS}/{group}"
    me = client.acl_policy.owner
    try:
        raw, _ = client.get(path)
        acl = decode_acl(raw)
    except NoAuthError:
        raise refusal(client, group, operation, f"ZooKeeper refused to read {path}") from None
    except NoNodeError:
        try:
            top, _ = client.get(zk.CONSUMERS)
        except NoAuthError:
            raise refusal(client, group, operation, f"ZooKeeper refused to read {zk.CONSUMERS}") from None
        except NoNodeError:
            return
        acl = decode_acl(top, NEW_GROUP_KEY)
        if acl is not None and operation is Operation.CONSUME and not perms_of(acl, me) & MEMBER:
            raise refusal(
                client,
                group,
                operation,
                "no ACL allows it (no ACL names the group, and the '*' group ACLs do not allow this principal)",
            ) from None
        if acl is None or operation is not Operation.CONSUME:
            return  # nothing to read yet, and nothing this reader will create
    if acl is None:
        return  # no group ACLs in this cluster: /consumers' shared ACL applies
    needs = _NEEDS.get(operation, MEMBER)
    if perms_of(acl, me) & needs != needs:
        raise refusal(client, group, operation, "no ACL allows it, or an ACL denies it")
    known = client.acl_policy.group_acls
    first = group not in known
    known[group] = tuple(acl)
    if first:
        _follow(client, group, path)


def _follow(client: AclKazooClient, group: str, path: str) -> None:
    """Keep the remembered ACL current while the client lives: the owner re-publishes it
    on every ACL change, and a long-lived member must not create znodes with a stale one
    (a revoked login in it)."""

    def changed(data: bytes | None, _stat: object) -> None:
        acl = decode_acl(data)
        if acl is not None:
            client.acl_policy.group_acls[group] = tuple(acl)

    DataWatch(client, path, changed)


@contextmanager
def group_refusals(client: Any, group: str, operation: Operation) -> Iterator[None]:
    """Turn ZooKeeper's NoAuth inside the block into the group's authorization error."""
    try:
        yield
    except NoAuthError:
        raise refusal(client, group, operation, f"ZooKeeper refused it under {zk.CONSUMERS}/{group}") from None


__all__ = ["check_group_access", "group_refusals", "refusal"]
