"""``logferry zk secure`` and ``logferry zk digest``: ZooKeeper ACLs on a cluster.

- ``zk digest --user NAME --password-file FILE`` prints the digest id ``NAME:hash``
  that an ACL names (what brokers list in ``[zookeeper] consumer_ids``); the password
  itself never appears in a config or on a command line.
- ``zk secure --zk HOSTS/CHROOT --zk-user U --zk-password-file F [--consumer-id ID ...]``
  logs in as the cluster's owner (the identity of its brokers and admins) and sets the
  ACL of :mod:`broker.coordination.zk_acl` on every znode of the cluster: the
  way to secure a cluster that ran without ZooKeeper ACLs. Idempotent: a second run
  changes nothing. Exit 0 done, 1 ZooKeeper refused (a znode the owner may not
  administer: secured by another identity), 2 usage.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from broker.cli.client_cmds import DEFAULT_ZK
from broker.cli.zk_args import add_zk_args, zk_security_from_args
from broker.common.commands import EXIT_FAILURE, EXIT_OK, report
from broker.common.errors import ConfigError
from broker.common.zk_connect import validate_zk_connect
from broker.common.zk_security import ZkSecurity, digest_id


def add_actions(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``zk secure`` and ``zk digest`` under ``zk``."""
    secure = actions.add_parser(
        "secure",
        help="put ZooKeeper ACLs on every znode of a cluster (idempotent)",
        description="Log in as the cluster's owner (--zk-user, the identity of its brokers "
        "and admins) and set the ACLs of docs/security.md 'ZooKeeper' on every "
        "znode under the chroot.",
    )
    secure.add_argument(
        "--zk", default=None, help=f"ZooKeeper connect string with chroot (default: $LOGFERRY_ZK or {DEFAULT_ZK})"
    )
    secure.add_argument(
        "--consumer-id",
        action="append",
        default=[],
        metavar="USER:HASH",
        help="a digest id (from `zk digest`) given read and write on /consumers "
        "(repeat; without one, only the owner may touch /consumers)",
    )
    add_zk_args(secure)
    secure.set_defaults(func=secure_cmd)

    digest = actions.add_parser(
        "digest",
        help="print the ZooKeeper digest id (user:hash) of a user and password",
        description="Print USER:HASH, the id a ZooKeeper digest ACL names, for "
        "[zookeeper] consumer_ids and `zk secure --consumer-id`.",
    )
    digest.add_argument("--user", required=True, help="the digest user name")
    source = digest.add_mutually_exclusive_group(required=True)
    source.add_argument("--password-file", type=Path, metavar="FILE", help="the password: the first line of FILE")
    source.add_argument("--password-env", metavar="VAR", help="the password: environment variable VAR")
    digest.set_defaults(func=digest_cmd)


def digest_cmd(args: argparse.Namespace) -> int:
    """Print ``user:hash``."""
    from broker.common.config import Validator
    from broker.common.zk_security import zookeeper_from_table

    table = {"user": args.user}
    if args.password_file is not None:
        table["password_file"] = str(args.password_file)
    else:
        table["password_env"] = args.password_env
    security = zookeeper_from_table(Validator(), table, where="")
    assert security is not None and security.password is not None
    print(digest_id(args.user, security.password))
    return EXIT_OK


def _owner_security(args: argparse.Namespace) -> ZkSecurity:
    security = zk_security_from_args(args)
    if security is None or not security.authenticated:
        raise ConfigError(
            "--zk-user: missing (zk secure logs in as the cluster's owner: "
            "--zk-user with --zk-password-file or --zk-password-env)"
        )
    from broker.common.config import Validator
    from broker.common.zk_security import zookeeper_from_table

    if args.consumer_id:  # checked as the config's consumer_ids are
        zookeeper_from_table(Validator(), {"consumer_ids": args.consumer_id}, where="--consumer-id")
    return ZkSecurity(
        user=security.user, password=security.password, tls=security.tls, consumer_ids=tuple(args.consumer_id)
    )


def _secure(client: Any, security: ZkSecurity) -> tuple[int, int]:
    """The zk_acl policy on every znode; with group ACLs stored, ``/consumers/**`` get
    the per-group ACLs derived from them instead (broker.coordination.group_acl)."""
    from broker.coordination.group_acl import secure_cluster

    assert security.digest_id is not None
    return secure_cluster(client, security.digest_id, security.consumer_ids)


def secure_cmd(args: argparse.Namespace) -> int:
    """Apply the ACL policy to every znode under the chroot; report what changed."""
    from kazoo.exceptions import KazooException, NoAuthError

    from broker.coordination import zk
    from broker.coordination.zk_acl import AclKazooClient

    where = args.zk or os.environ.get("LOGFERRY_ZK", DEFAULT_ZK)
    try:
        validate_zk_connect(where)
    except ConfigError as exc:
        raise ConfigError(f"{'--zk' if args.zk else '$LOGFERRY_ZK'}: {exc}") from None
    security = _owner_security(args)
    client = zk.connect(where, create=False, security=security)
    try:
        assert isinstance(client, AclKazooClient) and security.digest_id is not None
        # The policy from the options, not the ACL /consumers has now (zk.connect's
        # adoption): this command is what sets it.
        seen, changed = _secure(client, security)
    except NoAuthError:
        report(
            "zk secure",
            f"ZooKeeper refused to change an ACL at {where}: a znode is "
            f"secured by another identity than {security.user!r} (log in as the "
            "cluster's owner)",
        )
        return EXIT_FAILURE
    except KazooException as exc:
        report("zk secure", f"ZooKeeper at {where} failed: {exc!r}")
        return EXIT_FAILURE
    finally:
        zk.close(client)
    print(
        f"secured {where}: {seen} znodes, {changed} changed, owner {security.user}, "
        f"{len(security.consumer_ids)} consumer id(s)"
    )
    return EXIT_OK


__all__ = ["add_actions", "digest_cmd", "secure_cmd"]
