"""ACLs in ZooKeeper: one persistent znode per ACL under ``/acls``, its name the ACL.

The znode's name is the ACL itself (:meth:`broker.common.acl.Acl.key`:
``/acls/allow,User%3Amirror,consume,topic-prefix,web-``), with an empty payload. So
adding is one create (already there: nothing to do), removing one delete, and a broker
learns the whole set from one children watch on ``/acls``: no read-modify-write races
between two admins, no half-read state, and a change reaches every broker within the
watch's round trip (milliseconds). Operators can read the set with zkCli's ``ls /acls``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError
from kazoo.recipe.watchers import ChildrenWatch

from broker.common.acl import Acl, acl_from_key
from broker.common.errors import ConfigError, ZooKeeperError

log = logging.getLogger("logferry.acl")

ACLS = "/acls"
"""Parent of the ACL znodes (relative to the cluster's chroot)."""


def acl_path(acl: Acl) -> str:
    """The znode of one ACL."""
    return f"{ACLS}/{acl.key()}"


def read_acls(names: list[str]) -> list[Acl]:
    """The ACLs of ``/acls``'s children; a child that is not an ACL is logged and skipped
    (written by hand, or by a newer logferry) rather than failing every decision."""
    acls = []
    for name in names:
        try:
            acls.append(acl_from_key(name))
        except ConfigError as exc:
            log.warning("ignoring %s/%s: %s", ACLS, name, exc)
    return acls


class AclStore:
    """Adds, removes, lists and watches the cluster's ACLs through a kazoo client."""

    def __init__(self, client: Any):
        self.client = client

    def add(self, acl: Acl) -> bool:
        """Store ``acl``; False if it was already there."""
        try:
            self.client.create(acl_path(acl), b"", makepath=True)
            return True
        except NodeExistsError:
            return False
        except KazooException as exc:
            raise ZooKeeperError(f"cannot store ACL '{acl}' in ZooKeeper: {exc!r}") from None

    def remove(self, acl: Acl) -> bool:
        """Delete ``acl``; False if there was no such ACL."""
        try:
            self.client.delete(acl_path(acl))
            return True
        except NoNodeError:
            return False
        except KazooException as exc:
            raise ZooKeeperError(f"cannot remove ACL '{acl}' from ZooKeeper: {exc!r}") from None

    def all(self) -> list[Acl]:
        """Every stored ACL, sorted by principal, resource and operation."""
        try:
            names = self.client.get_children(ACLS)
        except NoNodeError:
            return []
        except KazooException as exc:
            raise ZooKeeperError(f"cannot list ACLs in ZooKeeper: {exc!r}") from None
        return sorted(read_acls(names), key=lambda a: (a.principal, a.resource, a.operation.value))

    def watch(self, on_change: Callable[[list[Acl]], None]) -> Callable[[], None]:
        """Call ``on_change`` with every ACL now (before returning) and after each change,
        on kazoo's thread; returns a function that stops the watch."""
        self.client.ensure_path(ACLS)
        stopped = threading.Event()

        def changed(names: list[str] | None) -> bool:
            if stopped.is_set():
                return False  # ends the kazoo watch
            on_change(read_acls(names or []))
            return True

        ChildrenWatch(self.client, ACLS, changed)
        return stopped.set


__all__ = ["ACLS", "AclStore", "acl_path", "read_acls"]
