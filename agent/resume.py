"""Resuming after a crash: what the cluster already holds of each file.

After a kill -9 the checkpoint lags what the brokers acknowledged (it is written every
``checkpoint_interval_s``); re-reading from it re-sends every line in between. At
start the agent therefore reads the tail of the partitions its files publish to, from
a little before the checkpoint's time, and finds, per file generation (``fid``), the
highest line offset already there. The first chunks read again from the checkpoint
then skip the lines at or before that offset instead of sending them: the file
pipeline re-cuts the same bytes into the same messages (it is deterministic from a
line start), so a message is skipped exactly when the cluster has a copy of it.

Where it cannot know (the cluster is unreachable, the tail since the checkpoint is
larger than ``resume_max_bytes``, the records have expired), it re-sends as before;
those duplicates carry the same ``(host, fid, offset)`` and the loader's dedup drops
them (docs/guarantees.md, "Agent").

This module is sans-IO except :func:`read_holdings`, which only uses
:class:`broker.client.SimpleConsumer`.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import msgpack

log = logging.getLogger("logferry.agent")

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
"""How many bytes of each partition's tail the agent reads at most at start."""


def fid_marker(fid: int) -> bytes:
    """The bytes ``"fid": <fid>`` takes in a message value (a cheap pre-filter)."""
    packed: bytes = msgpack.packb(fid)  # msgpack is untyped: Any to mypy
    return b"\xa3fid" + packed


def highest_offsets(values: Iterable[bytes], host: str, fids: Iterable[int]) -> dict[int, int]:
    """Per wanted ``fid``: the highest line offset among ``values`` of ``host``.

    ``values`` are message values as the agent encodes them (agent.encode); others
    (another host's, an older agent's without ``fid``, not msgpack at all) are ignored.
    A value is unpacked only when it contains a wanted fid's bytes.
    """
    wanted = set(fids)
    markers = [fid_marker(fid) for fid in wanted]
    found: dict[int, int] = {}
    if not markers:
        return found
    for value in values:
        if not any(marker in value for marker in markers):
            continue
        try:
            record = msgpack.unpackb(value)
        except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError):
            continue
        if not isinstance(record, dict) or record.get("host") != host:
            continue
        fid = record.get("fid")
        offset = record.get("offset")
        if fid in wanted and isinstance(offset, int) and offset > found.get(fid, -1):
            found[fid] = offset
    return found


class Skip(NamedTuple):
    """The result of dropping already-held messages from the front of a chunk."""

    keep_from: int
    """Index of the first message to send (``len(offsets)``: none)."""
    resume_at: int | None
    """File offset the checkpoint may move to: the first kept message's start, or
    None when every message is dropped (then the chunk's end)."""


def skip_held(offsets: Sequence[int], held_through: int) -> Skip:
    """Drop the leading messages that start at or before ``held_through``.

    The cluster holds a prefix of what one file sent (one key, one partition, an
    idempotent producer), so the held messages are a prefix of the chunk.
    """
    for keep, offset in enumerate(offsets):
        if offset > held_through:
            return Skip(keep, offset)
    return Skip(len(offsets), None)


def partition_of(key: bytes | None, count: int) -> list[int]:
    """The partitions a source's messages can be in: the key's (crc32, as the
    producer chooses), or every one without a key."""
    if key is None:
        return list(range(count))
    return [zlib.crc32(key) % count]


class Wanted(NamedTuple):
    """One file generation to look for."""

    topic: str
    key: bytes | None
    fid: int


def read_holdings(
    consumer: Any, host: str, wanted: Sequence[Wanted], since_ms: int, max_bytes: int = DEFAULT_MAX_BYTES
) -> dict[int, int]:
    """Read the partitions of ``wanted`` from ``since_ms`` to their end; per fid, the
    highest line offset held there (fids not found are absent).

    ``consumer``: a :class:`broker.client.SimpleConsumer`. A partition whose tail
    since ``since_ms`` exceeds ``max_bytes`` is not read (its files re-send: bounded
    work at start beats a perfect answer). Errors propagate (the caller falls back).
    """
    by_partition: dict[tuple[str, int], set[int]] = {}
    counts: dict[str, int] = {}
    for item in wanted:
        if item.topic not in counts:
            counts[item.topic] = len(consumer.partitions(item.topic))
        for partition in partition_of(item.key, counts[item.topic]):
            by_partition.setdefault((item.topic, partition), set()).add(item.fid)
    found: dict[int, int] = {}
    for (topic, partition), fids in sorted(by_partition.items()):
        start = consumer.offset_for_time(topic, partition, since_ms)
        end = consumer.offsets(topic, partition).end
        if end - start > max_bytes:
            log.warning(
                "%s-%d: %d bytes since the checkpoint, more than resume_max_bytes "
                "(%d); not reading them (these files re-send from their checkpoint)",
                topic,
                partition,
                end - start,
                max_bytes,
            )
            continue
        offset = start
        while offset < end:
            result = consumer.fetch(topic, partition, offset)
            if not result.batches:
                break
            values = (v for batch in result.batches for v in batch.values)
            for fid, line in highest_offsets(values, host, fids).items():
                if line > found.get(fid, -1):
                    found[fid] = line
            offset = result.next_offset
    return found


def describe(path: str, held: int, checkpoint: int) -> str:
    """The log line for one resumed file."""
    return (
        f"{path}: the cluster holds lines up to offset {held}; resuming after it "
        f"instead of re-sending from {checkpoint}"
    )


__all__ = [
    "DEFAULT_MAX_BYTES",
    "Skip",
    "Wanted",
    "describe",
    "fid_marker",
    "highest_offsets",
    "partition_of",
    "read_holdings",
    "skip_held",
]
