"""A consumer group's znodes: members, partition owners and committed offsets.

Layout (relative to the cluster's chroot; DESIGN.md)::

    /consumers/<group>/ids/<consumer id>        ephemeral  {subscription, pattern, streams,
                                                            start, strategy, host, pid, started}
    /consumers/<group>/owners/<topic>/<p>       ephemeral  the owning consumer id (utf-8)
    /consumers/<group>/offsets/<topic>/<p>      persistent {offset, skip, time}

The committed position of a partition is ``(offset, skip)``: ``offset`` is the byte
offset of a batch and ``skip`` how many of that batch's messages were already
processed. A consumer that resumes fetches at ``offset`` and drops the first ``skip``
messages, so a clean handover in the middle of a batch repeats nothing, while the
broker only ever sees batch boundaries. ``time`` (ms since the epoch) is when the
position was committed; ``logferry group describe`` shows it.

This module only names paths and reads or writes znodes (deleting a group is
:func:`broker.coordination.group_nodes.delete_group`, shared with the Kafka listener): who may write what and when
is the coordinator's business (:mod:`broker.client.group.rebalance`), and the command line
(:mod:`broker.cli.group_cmd`) reads the same znodes through the same functions.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple, TypeGuard

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from broker.coordination import zk
from broker.coordination.group_nodes import delete_group, group_path

TopicPartition = tuple[str, int]


def ids_path(group: str) -> str:
    """Parent of the members' ephemeral registrations."""
    return f"{group_path(group)}/ids"


def member_path(group: str, consumer_id: str) -> str:
    """Ephemeral registration of one member."""
    return f"{ids_path(group)}/{consumer_id}"


def owners_path(group: str, topic: str | None = None) -> str:
    """Parent of the ownership znodes (of one topic when given)."""
    base = f"{group_path(group)}/owners"
    return base if topic is None else f"{base}/{topic}"


def owner_path(group: str, topic: str, partition: int) -> str:
    """Ephemeral ownership of one partition: its data is the owner's consumer id."""
    return f"{owners_path(group, topic)}/{partition}"


def offsets_path(group: str, topic: str | None = None) -> str:
    """Parent of the committed offsets (of one topic when given)."""
    base = f"{group_path(group)}/offsets"
    return base if topic is None else f"{base}/{topic}"


def offset_path(group: str, topic: str, partition: int) -> str:
    """Persistent committed position of one partition."""
    return f"{offsets_path(group, topic)}/{partition}"


class Committed(NamedTuple):
    """A committed position, as stored in an ``offsets`` znode."""

    offset: int
    """Byte offset of the batch to fetch from."""
    skip: int
    """Messages at the start of that batch already processed (dropped on resume)."""
    time: int
    """When it was committed, ms since the epoch (0 if unknown)."""

    def encode(self) -> bytes:
        """JSON, readable with zkCli."""
        return json.dumps({"offset": self.offset, "skip": self.skip, "time": self.time}, sort_keys=True).encode()

    @classmethod
    def decode(cls, raw: bytes | None) -> Committed | None:
        """Parse a znode's data; None when it is empty or malformed.

        A bare integer (the paper's format, or a hand-written value) is accepted as an
        offset with nothing to skip.
        """
        if not raw:
            return None
        try:
            value = json.loads(raw)
        except ValueError:
            return None
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return cls(value, 0, 0)
        if not isinstance(value, dict):
            return None
        offset, skip, when = value.get("offset"), value.get("skip", 0), value.get("time", 0)
        if not (_is_count(offset) and _is_count(skip) and _is_count(when)):
            return None
        return cls(offset, skip, when)

    @classmethod
    def now(cls, offset: int, skip: int = 0) -> Committed:
        """A position stamped with the current wall-clock time."""
        return cls(offset, skip, int(time.time() * 1000))


def _is_count(x: object) -> TypeGuard[int]:
    """A non-negative JSON integer (``bool`` is an ``int`` to Python, not to JSON)."""
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


class Member(NamedTuple):
    """One registered member as read from its ``ids`` znode."""

    consumer_id: str
    data: dict[str, Any]
    """The registration's JSON fields (see the module docstring)."""
    ctime_ms: int
    """When the registration znode was created (ZooKeeper's clock)."""


def list_groups(client: KazooClient) -> list[str]:
    """Every group with a znode under ``/consumers``."""
    try:
        return sorted(client.get_children(zk.CONSUMERS))
    except NoNodeError:
        return []


def read_members(client: KazooClient, group: str, watch: Callable[[object], None] | None = None) -> dict[str, Member]:
    """Registered members by id (a member vanishing mid-read is skipped).

    ``watch`` (a kazoo watch function) is set on the ``ids`` children, so the caller
    hears about the next join or leave.
    """
    try:
        children = client.get_children(ids_path(group), watch=watch)
    except NoNodeError:
        client.ensure_path(ids_path(group))
        children = client.get_children(ids_path(group), watch=watch)
    asyncs = [(child, client.get_async(member_path(group, child))) for child in children]
    members: dict[str, Member] = {}
    for child, result in asyncs:
        try:
            raw, stat = result.get()
        except NoNodeError:
            continue
        members[child] = Member(child, zk.decode(raw), int(stat.ctime))
    return members


def _read_partition_nodes(
    client: KazooClient,
    topic_dir: Callable[[str | None], str],
    node_path: Callable[[str, int], str],
    topics: Iterable[str] | None,
) -> dict[TopicPartition, bytes]:
    """Raw data of ``<topic_dir(topic)>/<partition>`` nodes, fetched asynchronously.

    ``topic_dir(None)`` is the parent of the per-topic directories; nodes that vanish
    while being read are skipped.
    """
    try:
        names = sorted(topics) if topics is not None else client.get_children(topic_dir(None))
    except NoNodeError:
        return {}
    out: dict[TopicPartition, bytes] = {}
    for topic in names:
        try:
            children = client.get_children(topic_dir(topic))
        except NoNodeError:
            continue
        asyncs = [(int(c), client.get_async(node_path(topic, int(c)))) for c in children if c.isdigit()]
        for p, result in asyncs:
            try:
                raw, _ = result.get()
            except NoNodeError:
                continue
            out[(topic, p)] = raw or b""
    return out


def read_owners(client: KazooClient, group: str, topics: Iterable[str] | None = None) -> dict[TopicPartition, str]:
    """``{(topic, partition): owner consumer id}`` of the given (default: all) topics."""
    raw = _read_partition_nodes(client, lambda t: owners_path(group, t), lambda t, p: owner_path(group, t, p), topics)
    return {tp: data.decode("utf-8", "replace") for tp, data in raw.items()}


def read_offsets(
    client: KazooClient, group: str, topics: Iterable[str] | None = None
) -> dict[TopicPartition, Committed]:
    """Committed positions of the given (default: all) topics of a group."""
    raw = _read_partition_nodes(client, lambda t: offsets_path(group, t), lambda t, p: offset_path(group, t, p), topics)
    out: dict[TopicPartition, Committed] = {}
    for tp, data in raw.items():
        committed = Committed.decode(data)
        if committed is not None:
            out[tp] = committed
    return out


def read_offset(client: KazooClient, group: str, topic: str, partition: int) -> Committed | None:
    """The committed position of one partition, or None when there is none."""
    try:
        raw, _ = client.get(offset_path(group, topic, partition))
    except NoNodeError:
        return None
    return Committed.decode(raw)


def write_offsets(client: KazooClient, group: str, positions: Mapping[TopicPartition, Committed]) -> None:
    """Write positions unconditionally, creating znodes as needed (administration only).

    Members commit through the coordinator, which guards each write with its
    ownership; this is for ``logferry group seek`` when no member runs.
    """
    asyncs = []
    for (topic, p), committed in sorted(positions.items()):
        path = offset_path(group, topic, p)
        asyncs.append((path, committed, client.set_async(path, committed.encode())))
    for path, committed, result in asyncs:
        try:
            result.get()
        except NoNodeError:
            client.create(path, committed.encode(), makepath=True)


__all__ = [
    "Committed",
    "Member",
    "TopicPartition",
    "delete_group",
    "group_path",
    "ids_path",
    "list_groups",
    "member_path",
    "offset_path",
    "offsets_path",
    "owner_path",
    "owners_path",
    "read_members",
    "read_offset",
    "read_offsets",
    "read_owners",
    "write_offsets",
]
