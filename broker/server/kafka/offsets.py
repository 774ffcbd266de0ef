"""Kafka offsets are message offsets: where they lie in a log addressed by bytes.

On the Kafka listener every offset (produce answers, fetch positions, high watermark,
log start, ListOffsets, committed offsets) is the log's per-partition *message offset*
(docs/storage.md, "Message offsets"); logferry's own protocol keeps byte offsets.
:class:`PartitionLog` answers both ways (``batch_for_message``, ``message_offset_at``)
by bisecting a sparse index and walking at most an index interval of batch headers.

A Kafka consumer asks for the same few positions over and over: where its last fetch
ended, and the high watermark, which is where a produce or a fetch ended. So
:class:`Positions` remembers, per partition, the last few hundred (message offset, byte
offset) pairs at which a batch starts that this listener saw (ends of served ranges and
of appends), and a fetch, a produce answer or a high watermark is found there without
reading the log. A pair is only ever added from the log itself, and the cache of a
partition is dropped when its log's bytes were cut or replaced
(:attr:`PartitionLog.generation`), so a hit is what the log would answer.
"""

from __future__ import annotations

from broker.storage.partition_log import PartitionLog


class _Pairs:
    """One partition's remembered pairs, both ways, oldest dropped first."""

    __slots__ = ("plog", "generation", "bytes_at", "messages_at")

    def __init__(self, plog: PartitionLog) -> None:
        self.plog = plog
        self.generation = plog.generation
        self.bytes_at: dict[int, int] = {}
        """message offset -> byte offset of the batch it starts."""
        self.messages_at: dict[int, int] = {}
        """byte offset of a batch start -> its first message offset."""


class Positions:
    """Per partition, recently seen batch starts as (message offset, byte offset) pairs;
    see the module docstring."""

    KEEP = 256

    def __init__(self) -> None:
        self._pairs: dict[tuple[str, int], _Pairs] = {}

    def _of(self, plog: PartitionLog) -> _Pairs:
        key = (plog.topic, plog.partition)
        pairs = self._pairs.get(key)
        if pairs is None or pairs.plog is not plog or pairs.generation != plog.generation:
            pairs = self._pairs[key] = _Pairs(plog)
        return pairs

    def add(self, plog: PartitionLog, message: int, offset: int) -> None:
        """Remember that the batch at byte ``offset`` of ``plog`` (or its end) starts
        with message offset ``message``."""
        pairs = self._of(plog)
        by_message, by_byte = pairs.bytes_at, pairs.messages_at
        by_message[message] = offset
        by_byte[offset] = message
        if len(by_message) > self.KEEP:
            del by_message[next(iter(by_message))]
        if len(by_byte) > self.KEEP:
            del by_byte[next(iter(by_byte))]

    def locate(self, plog: PartitionLog, message: int) -> tuple[int, int]:
        """(byte offset of the batch holding message offset ``message``, how many of its
        messages come before it); ``(end_offset, 0)`` at ``end_message``.
        OffsetOutOfRangeError (in message offsets) outside the log."""
        known = self._of(plog).bytes_at.get(message)
        if known is not None:
            return known, 0
        offset, skip = plog.batch_for_message(message)
        if not skip:
            self.add(plog, message, offset)
        return offset, skip

    def message_at(self, plog: PartitionLog, offset: int) -> int:
        """The message offset of the batch starting at byte ``offset`` (``end_message``
        at the log end). OffsetOutOfRangeError outside the log, InvalidOffsetError if no
        batch starts there."""
        if offset == plog.end_offset:
            return plog.end_message
        known = self._of(plog).messages_at.get(offset)
        if known is not None:
            return known
        message = plog.message_offset_at(offset)
        self.add(plog, message, offset)
        return message

    def high_watermark(self, plog: PartitionLog) -> int:
        """The visible end (what consumers may read up to) in message offsets."""
        return self.message_at(plog, plog.visible_end)


__all__ = ["Positions"]
