"""A group's committed positions in ZooKeeper, read as Kafka message offsets.

Three kinds of value may be stored for a partition of a group
(:mod:`broker.server.kafka.group_service` writes them):

* a native commit, ``/consumers/<g>/offsets/<t>/<p>`` = ``{offset, skip, time}``: the
  byte offset of a batch and how many of its messages were consumed;
* a Kafka commit, ``/consumers/<g>/kafka_offsets/<t>/<p>`` = ``{offset, unit:
  "message", time}``: a message offset;
* a Kafka commit written before message offsets existed: the same node without
  ``unit``. Its offset is the old mapping's: the i-th message of the batch at byte
  ``b`` was ``b + i``.

Native and old commits become message offsets through a copy of the partition's log
(the same on every replica); without one they cannot be read as messages.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from broker.common.errors import LogferryError
from broker.storage.partition_log import PartitionLog
from broker.wire import records

MESSAGE_UNIT = "message"
"""``unit`` of a Kafka commit that holds a message offset."""


class Commit(NamedTuple):
    """One stored commit, as read from ZooKeeper."""

    offset: int
    """A message offset, or a byte offset (native and old Kafka commits)."""
    skip: int | None
    """Native commits: messages of the batch at ``offset`` consumed; else None."""
    in_messages: bool
    """Whether ``offset`` is a message offset already."""
    time: int
    """When it was committed (ms since the epoch; 0 if unknown)."""


def parse_commit(value: dict[str, Any], kafka: bool) -> Commit:
    """The commit in a node's decoded JSON ``value`` (``kafka``: a ``kafka_offsets``
    node). KeyError, TypeError or ValueError if it is not one."""
    offset = int(value["offset"])
    time = int(value.get("time", 0))
    if not kafka:
        return Commit(offset, int(value.get("skip", 0)), False, time)
    return Commit(offset, None, value.get("unit") == MESSAGE_UNIT, time)


def committed_message(commit: Commit, plog: PartitionLog | None) -> int | None:
    """The message offset ``commit`` stands for; None when it cannot be told (a byte
    offset without a copy of the log, or past its end, or not a batch start). A byte
    offset below the log start (retention deleted it) becomes the message before the
    log start: out of range, so the client's ``auto.offset.reset`` decides, as for a
    message offset there."""
    if commit.in_messages:
        return commit.offset
    if plog is None:
        return None
    offset = commit.offset
    try:
        if offset < plog.start_offset:
            return max(plog.start_message - 1, -1)
        if offset >= plog.end_offset:
            return plog.end_message if offset == plog.end_offset else None
        if commit.skip is not None:
            return plog.message_offset_at(offset) + commit.skip
        batch = plog.batch_start_at_or_before(offset)  # an old Kafka commit: b + i
        head = plog.read_bytes(batch, records.HEADER_SIZE)
        if len(head) < records.HEADER_SIZE:
            return None
        count: int = records.BATCH_HEADER.unpack_from(head)[4]
        return plog.message_offset_at(batch) + min(offset - batch, count)
    except (LogferryError, OSError):  # a commit that names no batch, an unreadable log
        return None


__all__ = ["MESSAGE_UNIT", "Commit", "committed_message", "parse_commit"]
