"""The transaction coordinator's state log, ``__transaction_state``, as records (sans IO).

Kafka keeps its transaction coordinators' state in a replicated internal topic; so does
logferry. Each transactional id belongs to one partition of the topic
(:func:`partition_for`), and the leader of that partition is the id's coordinator: it
appends a record per state change and rebuilds the state of every id of the partition by
reading the partition from its start when it becomes leader (:func:`replay`).

A record is one message of a native batch (magic 1, written by the broker itself):

    key     the transactional id, UTF-8
    value   its state (:meth:`~broker.server.kafka.txn_state.TxnMetadata.to_json`, the
            JSON ZooKeeper held before), or empty: a tombstone (the id was forgotten)

The last record of an id wins. The partition is kept short by snapshots: the
coordinator appends the current state of every id of the partition (one record each)
and then moves the log start to the snapshot's first message, so what lies below it,
superseded by the snapshot, goes (:func:`snapshot_batches`). A snapshot needs no marker:
replaying from any batch boundary at or below a complete snapshot gives the same states.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator

from broker.common.names import TRANSACTION_STATE_TOPIC
from broker.wire import records

TOPIC = TRANSACTION_STATE_TOPIC
"""The internal topic (Kafka's name): its partitions' leaders are the coordinators."""
SNAPSHOT_BATCH_BYTES = 256 * 1024
"""A snapshot's records go in batches of about this size (a reader reads whole batches)."""
TOMBSTONE = b""


def partition_for(transactional_id: str, partitions: int) -> int:
    """The partition of ``__transaction_state`` that holds ``transactional_id`` (the
    same hash as a group's coordinator, :func:`broker.server.kafka.groups.coordinator_for`)."""
    return zlib.crc32(transactional_id.encode()) % partitions


def encode_records(items: Iterable[tuple[str, bytes]], now_ms: int) -> bytes:
    """One batch of ``(transactional id, state or TOMBSTONE)`` records."""
    keys: list[bytes | None] = []
    values: list[bytes] = []
    for txn_id, value in items:
        keys.append(txn_id.encode())
        values.append(value)
    return records.encode_batch(values, keys, now_ms)


def snapshot_batches(states: dict[str, bytes], now_ms: int) -> Iterator[bytes]:
    """The records of every id's current state, in batches of about
    :data:`SNAPSHOT_BATCH_BYTES` (ids sorted, so a snapshot is reproducible)."""
    chunk: list[tuple[str, bytes]] = []
    size = 0
    for txn_id in sorted(states):
        value = states[txn_id]
        chunk.append((txn_id, value))
        size += len(txn_id) + len(value) + 8
        if size >= SNAPSHOT_BATCH_BYTES:
            yield encode_records(chunk, now_ms)
            chunk, size = [], 0
    if chunk:
        yield encode_records(chunk, now_ms)


class Replay:
    """Builds the states of a partition from its log bytes, fed in order (:meth:`feed`)."""

    def __init__(self, offset: int):
        self.offset = offset
        """Log byte offset of the next byte expected."""
        self.states: dict[str, bytes] = {}
        """Transactional id -> its last state (tombstoned ids are absent)."""
        self.records = 0

    def feed(self, data: bytes | bytearray | memoryview) -> int:
        """Apply the whole batches in ``data`` (the log from :attr:`offset`); returns the
        bytes used (a batch cut at the end is left for the next call).
        CorruptBatchError if a batch fails its CRC or does not decode."""
        batches, used = records.decode_batches(data, self.offset)
        states = self.states
        for batch in batches:
            keys = batch.keys or []
            for key, value in zip(keys, batch.values, strict=False):
                if key is None:
                    continue
                txn_id = bytes(key).decode()
                if value:
                    states[txn_id] = bytes(value)
                else:
                    states.pop(txn_id, None)
            self.records += len(batch.values)
        self.offset += used
        return used


def replay(data: bytes | bytearray | memoryview, offset: int = 0) -> dict[str, bytes]:
    """The states the log bytes ``data`` (starting at byte ``offset``) leave."""
    rebuilt = Replay(offset)
    rebuilt.feed(data)
    return rebuilt.states


__all__ = [
    "SNAPSHOT_BATCH_BYTES",
    "TOMBSTONE",
    "TOPIC",
    "Replay",
    "encode_records",
    "partition_for",
    "replay",
    "snapshot_batches",
]
