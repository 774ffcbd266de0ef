"""``logferry user create|delete|list``: SCRAM users of one cluster, kept in its ZooKeeper.

The password of ``create`` comes from ``--password-file FILE`` (its first line) or the
environment variable named by ``--password-env NAME``, never from the command line
(other users see a command line in ``ps``) and never from a log line. ZooKeeper gets
only salted hashes (:mod:`broker.coordination.credentials`); ``list`` shows names and
mechanisms, no secret. Brokers see a change within their ``auth.credential_cache_s``.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from broker.cli.client_cmds import DEFAULT_ZK
from broker.cli.zk_args import add_zk_args, zk_target
from broker.common.errors import ConfigError, LogferryError, ZooKeeperError
from broker.common.sasl import MECHANISMS, password_from_env, read_password_file
from broker.common.zk_connect import validate_zk_connect
from broker.coordination import zk
from broker.coordination.credentials import (
    DEFAULT_ITERATIONS,
    CredentialStore,
    make_credentials,
    validate_user_name,
)


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``user`` and its actions."""
    user = subparsers.add_parser(
        "user",
        help="manage SCRAM users (credentials stored hashed in ZooKeeper)",
        description="Create, delete or list the SASL SCRAM users of a cluster.",
    )
    actions = user.add_subparsers(dest="user_command", metavar="ACTION")
    actions.required = True

    create = actions.add_parser("create", help="create a user (or replace its password)")
    create.add_argument("name")
    source = create.add_mutually_exclusive_group(required=True)
    source.add_argument("--password-file", metavar="FILE", help="read the password from FILE (its first line)")
    source.add_argument("--password-env", metavar="NAME", help="read the password from environment variable NAME")
    create.add_argument(
        "--mechanism",
        action="append",
        choices=MECHANISMS,
        help="store credentials for this mechanism (repeat; default: both)",
    )
    create.add_argument(
        "--iterations", type=int, default=DEFAULT_ITERATIONS, help=f"PBKDF2 iterations (default: {DEFAULT_ITERATIONS})"
    )
    create.add_argument("--replace", action="store_true", help="replace the credentials of an existing user")
    create.set_defaults(func=create_cmd)

    delete = actions.add_parser("delete", help="delete a user")
    delete.add_argument("name")
    delete.set_defaults(func=delete_cmd)

    listing = actions.add_parser("list", help="list users and their mechanisms (no secrets)")
    listing.set_defaults(func=list_cmd)

    for action in (create, delete, listing):
        action.add_argument(
            "--zk", default=None, help=f"ZooKeeper connect string with chroot (default: $LOGFERRY_ZK or {DEFAULT_ZK})"
        )
        add_zk_args(action)  # /config/users is the ZooKeeper owner's (docs/security.md)


def _store(args: argparse.Namespace, create: bool) -> tuple[CredentialStore, Any]:
    connect = args.zk or os.environ.get("LOGFERRY_ZK", DEFAULT_ZK)
    try:
        connect = validate_zk_connect(connect)
    except ConfigError as exc:
        raise ConfigError(f"{'--zk' if args.zk else '$LOGFERRY_ZK'}: {exc}") from None
    client = zk.connect(zk_target(args, connect), create=create)
    return CredentialStore(client), client


def create_cmd(args: argparse.Namespace) -> int:
    name = validate_user_name(args.name)
    if args.password_file:
        password = read_password_file(Path(args.password_file).expanduser())
    else:
        password = password_from_env(args.password_env)
    credentials = make_credentials(password, tuple(args.mechanism or MECHANISMS), args.iterations)
    store, client = _store(args, create=True)
    try:
        if not _call(lambda: store.put(name, credentials, replace=args.replace)):
            raise ConfigError(f"user {name!r} exists (add --replace to change its password)")
    finally:
        zk.close(client)
    print(f"user {name} {'updated' if args.replace else 'created'} ({', '.join(sorted(credentials))})")
    return 0


def delete_cmd(args: argparse.Namespace) -> int:
    name = validate_user_name(args.name)
    store, client = _store(args, create=False)
    try:
        if not _call(lambda: store.delete(name)):
            raise ConfigError(f"no user {name!r}")
    finally:
        zk.close(client)
    print(f"user {name} deleted")
    return 0


def list_cmd(args: argparse.Namespace) -> int:
    store, client = _store(args, create=False)
    try:
        users = _call(store.users)
    finally:
        zk.close(client)
    if not users:
        print("no users")
        return 0
    width = max(len(n) for n in users)
    print(f"{'USER':<{width}}  MECHANISMS")
    for name, mechanisms in users.items():
        print(f"{name:<{width}}  {', '.join(mechanisms) or '-'}")
    return 0


def _call(fn: Callable[[], Any]) -> Any:
    """Run a kazoo call; its failures become one ZooKeeperError line."""
    try:
        return fn()
    except LogferryError:
        raise
    except Exception as exc:
        raise ZooKeeperError(f"ZooKeeper refused the change: {type(exc).__name__} {exc}") from None


__all__ = ["add_parser"]
