"""``logferry acl add|remove|list``: the cluster's ACLs, kept in ZooKeeper.

``logferry acl add --principal User:mirror --operation consume --topic-prefix web- --allow``
stores one ACL per operation given; brokers with ``[authorizer] enabled = true`` apply
it within a second, without a restart (docs/security.md). ACLs live in ZooKeeper, so
these commands take ``--zk`` (never ``--brokers``). A bad principal, operation or
resource name is a usage error (exit 2) naming what is wrong, before connecting.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from broker.cli.client_cmds import DEFAULT_ZK
from broker.cli.zk_args import add_zk_args, zk_target
from broker.common.acl import (
    CLUSTER,
    Acl,
    Operation,
    Resource,
    ResourceType,
    make_acl,
    parse_principal,
)
from broker.common.errors import ConfigError
from broker.common.zk_connect import validate_zk_connect

if TYPE_CHECKING:
    from kazoo.client import KazooClient

    from broker.coordination.acl_store import AclStore


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``acl add|remove|list`` on the main parser's subparsers."""
    acl = sub.add_parser(
        "acl",
        help="add, remove or list ACLs (who may do what)",
        description="Manage the cluster's ACLs (docs/security.md). They take "
        "effect on brokers with [authorizer] enabled = true.",
    )
    asub = acl.add_subparsers(dest="acl_command", metavar="ACTION")
    asub.required = True
    for name, helptext in (
        ("add", "allow or deny an operation to a principal"),
        ("remove", "remove an ACL (the same options as it was added with)"),
    ):
        p = asub.add_parser(name, help=helptext, description=helptext[0].upper() + helptext[1:] + ".")
        _zk_arg(p)
        p.add_argument(
            "--principal",
            required=True,
            help="User:<name> (a SCRAM user or a certificate subject), or '*' for everyone",
        )
        p.add_argument(
            "--operation",
            required=True,
            action="append",
            help=f"one of {', '.join(o.value for o in Operation)} (repeatable)",
        )
        _resource_args(p, required=True)
        verdict = p.add_mutually_exclusive_group(required=True)
        verdict.add_argument("--allow", dest="allow", action="store_true", help="allow it")
        verdict.add_argument(
            "--deny", dest="allow", action="store_false", help="deny it (a deny wins over every allow)"
        )
        p.set_defaults(func=add_cmd if name == "add" else remove_cmd)
    p = asub.add_parser(
        "list",
        help="list ACLs (optionally those of a principal or resource)",
        description="List the ACLs, one per line; the filters keep those of a "
        "principal and those that apply to a resource.",
    )
    _zk_arg(p)
    p.add_argument("--principal", help="only this principal's ACLs (and those of '*')")
    _resource_args(p, required=False)
    p.set_defaults(func=list_cmd)


def _zk_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--zk", default=None, help=f"ZooKeeper connect string with chroot (default: $LOGFERRY_ZK or {DEFAULT_ZK})"
    )
    add_zk_args(parser)


def _resource_args(parser: argparse.ArgumentParser, required: bool) -> None:
    resource = parser.add_mutually_exclusive_group(required=required)
    resource.add_argument("--topic", metavar="NAME", help="a topic ('*': every topic)")
    resource.add_argument("--topic-prefix", metavar="PREFIX", help="every topic whose name starts so")
    resource.add_argument("--group", metavar="NAME", help="a consumer group ('*': every group)")
    resource.add_argument(
        "--transactional-id",
        metavar="ID",
        help="a Kafka transactional id ('*': every id; produce: use it in transactions, Kafka's WRITE)",
    )
    resource.add_argument(
        "--cluster", action="store_true", help="the cluster (alter: replicate between brokers, elect leaders)"
    )


def _resource(args: argparse.Namespace) -> Resource | None:
    if args.topic is not None:
        return Resource(ResourceType.TOPIC, args.topic)
    if args.topic_prefix is not None:
        return Resource(ResourceType.TOPIC_PREFIX, args.topic_prefix)
    if args.group is not None:
        return Resource(ResourceType.GROUP, args.group)
    if args.transactional_id is not None:
        return Resource(ResourceType.TRANSACTIONAL_ID, args.transactional_id)
    return CLUSTER if args.cluster else None


def acls_from_args(args: argparse.Namespace) -> list[Acl]:
    """The ACLs an ``add`` or ``remove`` names (one per ``--operation``), validated."""
    resource = _resource(args)
    assert resource is not None  # argparse requires one
    return [make_acl(args.principal, op, resource, args.allow) for op in args.operation]


def _store(args: argparse.Namespace) -> tuple[AclStore, KazooClient]:
    """The ACL store, and the client to close."""
    from broker.coordination import zk
    from broker.coordination.acl_store import AclStore

    where = args.zk or os.environ.get("LOGFERRY_ZK", DEFAULT_ZK)
    try:
        validate_zk_connect(where)
    except ConfigError as exc:
        raise ConfigError(f"{'--zk' if args.zk else '$LOGFERRY_ZK'}: {exc}") from None
    client = zk.connect(zk_target(args, where), create=False)
    return AclStore(client), client


def format_acl(acl: Acl) -> str:
    """One line of ``acl list``: ``allow  User:mirror  consume  topic-prefix 'web-'``."""
    return f"{'allow' if acl.allow else 'deny':<5}  {acl.principal}  {acl.operation}  {acl.resource}"


def add_cmd(args: argparse.Namespace) -> int:
    acls = acls_from_args(args)  # usage errors before connecting
    store, client = _store(args)
    try:
        for acl in acls:
            added = store.add(acl)
            print(f"{'added' if added else 'already there'}: {format_acl(acl)}")
        _secure_groups(store, client, acls)
    finally:
        _close(client)
    return 0


def remove_cmd(args: argparse.Namespace) -> int:
    acls = acls_from_args(args)
    store, client = _store(args)
    try:
        missing = []
        for acl in acls:
            if store.remove(acl):
                print(f"removed: {format_acl(acl)}")
            else:
                missing.append(acl)
        _secure_groups(store, client, acls)
        if missing:
            held = [str(a) for a in store.all() if a.principal == missing[0].principal]
            hint = f"; its ACLs: {'; '.join(held)}" if held else "; that principal has no ACLs"
            raise ConfigError(f"no such ACL: {'; '.join(map(str, missing))}{hint}")
    finally:
        _close(client)
    return 0


def _filtered(acls: list[Acl], principal: str | None, resource: Resource | None) -> Iterator[Acl]:
    for acl in acls:
        if principal is not None and acl.principal not in (principal, "*"):
            continue
        if (
            resource is not None
            and acl.resource != resource
            and not (resource.type is not ResourceType.TOPIC_PREFIX and acl.resource.matches(resource))
        ):
            continue
        yield acl


def list_cmd(args: argparse.Namespace) -> int:
    principal = parse_principal(args.principal) if args.principal is not None else None
    resource = _resource(args)
    store, client = _store(args)
    try:
        acls = list(_filtered(store.all(), principal, resource))
    finally:
        _close(client)
    for acl in acls:
        print(format_acl(acl))
    return 0


def _secure_groups(store: Any, client: Any, changed: list[Acl]) -> None:
    """Re-derive the groups' ZooKeeper ACLs after a change (docs/security.md, "Consumer
    groups and their offsets"): on a cluster with ZooKeeper logins, run as its owner."""
    from broker.coordination.group_acl import apply_group_acls, group_mode
    from broker.coordination.zk_acl import AclKazooClient

    if not isinstance(client, AclKazooClient):
        if group_mode(changed):
            print(
                "note: no ZooKeeper login (--zk-user): group ACLs are enforced in "
                "ZooKeeper only on a cluster with logins (docs/security.md)"
            )
        return
    acls = store.all()
    if not group_mode(acls) and not group_mode(changed):
        return
    _, n = apply_group_acls(client, client.acl_policy.owner, acls)
    print(f"group znodes: {n} ZooKeeper ACL(s) and published ACL(s) changed")


def _close(client: object) -> None:
    from broker.coordination import zk

    zk.close(client)


__all__ = ["acls_from_args", "add_parser", "format_acl"]
