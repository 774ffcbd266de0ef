"""Deleting a consumer group's znodes: the whole group, or its offsets of some partitions.

One code path for both protocols: ``logferry group delete`` (through
:class:`broker.client.GroupAdmin`) and Kafka's DeleteGroups and OffsetDelete on the
Kafka listener (:mod:`broker.server.kafka.group_deletion`) call these, since native and
Kafka groups keep their offsets in the same place (DESIGN.md, docs/groups.md)::

    /consumers/<group>/ids/<consumer id>            ephemeral  a native member
    /consumers/<group>/owners/<topic>/<p>           ephemeral  a native owner
    /consumers/<group>/offsets/<topic>/<p>          persistent a commit (byte offset, skip)
    /consumers/<group>/kafka_offsets/<topic>/<p>    persistent a Kafka commit (message offset)

Who may delete and when (no live member) is the caller's business.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError, NotEmptyError

from broker.coordination import zk

OFFSET_KINDS = ("offsets", "kafka_offsets")
"""The two kinds of commit node a partition of a group may have."""


def group_path(group: str) -> str:
    """Root of everything a group keeps in ZooKeeper."""
    return f"{zk.CONSUMERS}/{group}"


def delete_group(client: KazooClient, group: str) -> bool:
    """Remove every znode of a group; False when it did not exist.

    Retries when a member registers or commits while the tree is being removed.
    (kazoo's recursive delete answers a missing node as deleted: asked first.)
    """
    if client.exists(group_path(group)) is None:
        return False
    for _ in range(10):
        try:
            client.delete(group_path(group), recursive=True)
            return True
        except NoNodeError:
            return False
        except NotEmptyError:
            continue
    client.delete(group_path(group), recursive=True)
    return True


def delete_offsets(client: KazooClient, group: str, partitions: Iterable[tuple[str, int]]) -> int:
    """Remove the group's commits (both kinds) of ``partitions``, and a topic's node
    once it holds none; returns how many commit nodes were removed."""
    removed = 0
    topics: set[tuple[str, str]] = set()
    for topic, partition in partitions:
        for kind in OFFSET_KINDS:
            with contextlib.suppress(NoNodeError):
                client.delete(f"{group_path(group)}/{kind}/{topic}/{partition}")
                removed += 1
            topics.add((kind, topic))
    for kind, topic in sorted(topics):
        with contextlib.suppress(NoNodeError, NotEmptyError):  # gone, or other partitions' commits
            client.delete(f"{group_path(group)}/{kind}/{topic}")
    return removed


__all__ = ["OFFSET_KINDS", "delete_group", "delete_offsets", "group_path"]
