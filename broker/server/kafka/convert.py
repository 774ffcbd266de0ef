"""Between Kafka record batches and logferry's log, and the offset mapping.

Produce (:func:`store_batches`): a Kafka producer's record batch is stored as it
arrived, as a magic 3 batch (:mod:`broker.wire.records`): logferry's 22-byte header in
front, the Kafka batch behind it. Per batch, never per record: its CRC32C is checked
and the records are not read. Fetch (:func:`serve_chunks`): magic 3 batches go back
without their 22-byte header, their ``base_offset`` (outside the CRC32C) set to their
message offset; logferry's own batches (magic 1 and 2, written by agents and native
producers) are converted into record batches v2 (:func:`to_kafka`).

Offsets (docs/kafka.md): a Kafka offset is the log's message offset
(:meth:`broker.storage.partition_log.PartitionLog.batch_for_message`): the record batch
of a logferry batch whose first message has message offset ``m`` says ``base_offset =
m`` and ``last_offset_delta = count - 1``, so clients continue at ``m + count``, the
next batch's first message. Batches stored before message offsets (their
``last_offset_delta`` spanned the batch's bytes) are corrected when served.
"""

from __future__ import annotations

import struct
import time

from broker.common.errors import ControlBatchRefusedError, CorruptBatchError
from broker.server.kafka.chunks import Chunks
from broker.server.kafka.record_batch import encode_record_batch, iter_checked, set_crc, set_crc_at
from broker.wire import kafka_batch as kb
from broker.wire import records

_kafka_unpack = kb.KAFKA_HEADER.unpack_from
_TIMESTAMPS = struct.Struct(">qq")  # base_timestamp, max_timestamp at byte 27
_LEADER_EPOCH = struct.Struct(">i")  # partition_leader_epoch at byte 12, outside the CRC32C


def store_batches(buf: bytes | memoryview, max_batch_bytes: int | None = None) -> bytearray:
    """The magic 3 batches that store the record batches of a produce request's
    ``records`` field, in order; empty when it holds no data record (empty batches are
    dropped). MessageTooLargeError when a batch is longer than ``max_batch_bytes`` (the
    broker's ``max_message_bytes``); ControlBatchRefusedError for a control batch (a
    transaction marker: only the transaction coordinator writes those).

    Per batch: the CRC32C is checked (CorruptBatchError if a batch is torn, not magic 2,
    fails it, or names an unknown codec), ``base_offset`` zeroed (a fetch sets it),
    ``partition_leader_epoch`` set to -1 (as converted batches always said), and
    logferry's header (count, base timestamp, zlib CRC) put in front. A
    log-append-time batch gets the broker's clock as its timestamps, as Kafka does; a
    ``last_offset_delta`` other than ``count - 1`` is set to it (Kafka producers send
    that already). Only those two changes need the CRC32C recomputed.
    """
    out = bytearray()
    for pos, view in iter_checked(buf, max_batch_bytes):
        (_, _, _, _, _, attributes, last_delta, base_ts, _, _, _, _, count) = _kafka_unpack(view, 0)
        if attributes & kb.CONTROL:
            raise ControlBatchRefusedError(
                f"record batch at byte {pos} is a control batch: only the transaction coordinator writes markers"
            )
        if count == 0:
            continue
        if attributes & kb.COMPRESSION_MASK not in kb.COMPRESSION_NAMES:
            raise CorruptBatchError(
                f"record batch at byte {pos} uses compression codec "
                f"{attributes & kb.COMPRESSION_MASK}; known: "
                f"{kb.COMPRESSION_NAMES}"
            )
        batch = bytearray(view)
        kb.BASE_OFFSET.pack_into(batch, 0, 0)
        _LEADER_EPOCH.pack_into(batch, 12, -1)  # no epoch, as converted batches said
        changed = last_delta != count - 1
        if changed:
            kb.LAST_OFFSET_DELTA.pack_into(batch, kb.LAST_OFFSET_DELTA_AT, count - 1)
        if attributes & kb.TIMESTAMP_LOG_APPEND:
            base_ts = int(time.time() * 1000)
            _TIMESTAMPS.pack_into(batch, 27, base_ts, base_ts)
            changed = True
        if changed:
            set_crc(batch)
        out += stored_header(batch, count, base_ts)
        out += batch
    return out


def stored_header(batch: bytearray, count: int, base_ts: int) -> bytearray:
    """logferry's 22-byte header that makes the record batch ``batch`` (its CRC32C set)
    a magic 3 batch: length, magic 3, zlib CRC over the rest, count, base timestamp."""
    size = records.KAFKA_AT + len(batch)
    head = bytearray(records.KAFKA_AT)
    records.BATCH_HEADER.pack_into(head, 0, size - records.LENGTH_SIZE, records.MAGIC_KAFKA, 0, 0, count, base_ts)
    crc = records.batch_crc32(batch, records.batch_crc32(memoryview(head)[records.CRC_START :]))
    struct.pack_into(">I", head, 5, crc)
    return head


def serve_chunks(raw: bytearray, offset: int, message: int) -> tuple[Chunks, int, int]:
    """The record batches v2 a Kafka consumer gets for the whole stored batches in
    ``raw`` (log bytes from byte offset ``offset``, where a batch whose first message
    offset is ``message`` starts), how many bytes of ``raw`` they cover (a batch cut by
    the read's size is left for the next fetch), and the message offset after them.

    Nothing is copied for stored Kafka batches: each magic 3 batch is a view over
    ``raw`` (changed in place: its ``base_offset``, outside the CRC32C, set to its
    first message offset), its logferry header left out; converted batches (magic 1
    and 2) are new buffers. Per batch, no record read. A magic 3 batch stored before
    message offsets (its ``last_offset_delta`` spans its bytes) gets ``count - 1``
    there and its CRC32C recomputed (one pass over that batch, in C)."""
    view = memoryview(raw)
    end = len(view)
    pos = 0
    out = Chunks()
    unpack = records.BATCH_HEADER.unpack_from
    pack_base = kb.BASE_OFFSET.pack_into
    unpack_delta = kb.LAST_OFFSET_DELTA.unpack_from
    while end - pos >= records.HEADER_SIZE:
        length, magic, _, _, count, _ = unpack(view, pos)
        stop = pos + records.LENGTH_SIZE + length
        if stop > end:
            break
        if magic == records.MAGIC_KAFKA:
            at = pos + records.KAFKA_AT
            pack_base(raw, at, message)
            if unpack_delta(view, at + kb.LAST_OFFSET_DELTA_AT)[0] != count - 1:
                kb.LAST_OFFSET_DELTA.pack_into(raw, at + kb.LAST_OFFSET_DELTA_AT, count - 1)
                set_crc_at(raw, at, stop)
            out.append(view[at:stop])
        else:
            batches, used = records.decode_batches(view[pos:stop], offset + pos)
            if used != stop - pos:
                raise CorruptBatchError(f"malformed batch at offset {offset + pos}")
            out.append(to_kafka(batches[0], message))
        message += count
        pos = stop
    return out, pos, message


def to_kafka(batch: records.Batch, message: int) -> bytearray:
    """The record batch v2 a Kafka consumer gets for the logferry batch ``batch``,
    whose first message has message offset ``message``. A consumer that asked for an
    offset inside the batch drops the records before it itself, so the whole batch is
    sent.
    """
    headers = batch.headers
    kheaders = None
    if headers is not None:
        kheaders = [[(bytes(h[0] or b""), h[1]) for h in hs] if hs else None for hs in headers]
    timestamps = batch.timestamps if batch.deltas is not None else None
    return encode_record_batch(
        message,
        len(batch.values) - 1,
        batch.base_timestamp,
        timestamps,
        batch.keys,
        list(batch.values),
        kheaders,
    )


__all__ = ["serve_chunks", "store_batches", "stored_header", "to_kafka"]
