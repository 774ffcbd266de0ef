"""Between Kafka record batches and logferry batches, and the offset mapping.

Storage keeps one format, logferry's (:mod:`broker.wire.records`): a Kafka producer's
batch is converted on produce into one logferry batch (keys, values and timestamps as
the columns they always are; record headers as a fourth column, present only when a
record has headers), so the native consumers, the mirror and the loader read it like
any other batch. A Kafka fetch converts logferry batches into record batches v2.

Offsets (docs/kafka.md): the Kafka offset of the i-th message of the logferry batch at
byte offset ``b`` (``n`` bytes long) is ``b + i``; the record batch says
``base_offset = b`` and ``last_offset_delta = n - 1``, so clients continue at ``b + n``,
the next batch's byte offset. A batch of ``count`` messages is always longer than
``count`` bytes, so the offsets of different batches never collide and grow along the log.
"""

from __future__ import annotations

import struct
import time
import zlib
from typing import Sequence

import msgpack

from broker.kafka.record_batch import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    TIMESTAMP_LOG_APPEND,
    KafkaBatch,
    encode_record_batch,
)
from broker.wire import records
from broker.wire.codecs import CODEC_GZIP, CODEC_LZ4, CODEC_NONE, CODEC_ZSTD, compress

STORED_CODEC = {
    0: CODEC_NONE,
    COMPRESSION_GZIP: CODEC_GZIP,
    COMPRESSION_SNAPPY: CODEC_LZ4,  # logferry has no snappy; lz4 is as fast and as small
    COMPRESSION_LZ4: CODEC_LZ4,
    COMPRESSION_ZSTD: CODEC_ZSTD,
}
"""The codec a converted batch is stored with, by the Kafka producer's codec."""

_pack = msgpack.Packer(use_bin_type=True, autoreset=True).pack


def to_logferry(batch: KafkaBatch) -> bytes | None:
    """The logferry batch holding ``batch``'s records (None for a batch with no data
    records: a transaction marker or an empty batch).

    A null value is stored as b"" (logferry values are bytes); keys, timestamps and
    headers are kept. Log-append-time batches get the broker's clock.
    """
    if batch.is_control or not batch.values:
        return None
    values = [v if v is not None else b"" for v in batch.values]
    keys: list[bytes | None] | None = batch.keys
    if all(k is None for k in batch.keys):
        keys = None
    timestamps: Sequence[int] | int = batch.timestamps
    if batch.attributes & TIMESTAMP_LOG_APPEND:
        timestamps = int(time.time() * 1000)
    codec = STORED_CODEC[batch.compression]
    producer = None
    if batch.producer_id >= 0:  # an idempotent producer's: magic 2, deduplicated by the leader
        producer = (batch.producer_id, batch.producer_epoch, batch.base_sequence)
    if not any(batch.headers):
        return records.encode_batch(values, keys, timestamps, codec, producer)
    headers = [[list(h) for h in hs] if hs else None for hs in batch.headers]
    if isinstance(timestamps, int):
        base, deltas = timestamps, None
    else:
        base = timestamps[0]
        deltas = None if all(t == base for t in timestamps) else [t - base for t in timestamps]
    payload = _pack([keys, values, deltas, headers])
    if codec != CODEC_NONE:
        payload = compress(codec, payload)
    size = records.HEADER_SIZE if producer is None else records.HEADER_SIZE_V2
    buf = bytearray(size + len(payload))
    buf[size:] = payload
    if producer is None:
        records.BATCH_HEADER.pack_into(buf, 0, len(buf) - records.LENGTH_SIZE, records.MAGIC,
                                       0, codec, len(values), base)
    else:
        records.BATCH_HEADER_V2.pack_into(buf, 0, len(buf) - records.LENGTH_SIZE,
                                          records.MAGIC_V2, 0, codec, len(values), base,
                                          *producer)
    struct.pack_into(">I", buf, 5, zlib.crc32(memoryview(buf)[records.CRC_START:]))
    return bytes(buf)


def to_kafka(batch: records.Batch, skip_before: int = 0) -> bytearray:
    """The record batch v2 a Kafka consumer gets for the logferry batch ``batch``.

    ``skip_before``: a Kafka offset inside the batch the client asked for; clients
    drop the records before it themselves, so the whole batch is sent.
    """
    headers = batch.headers
    kheaders = None
    if headers is not None:
        kheaders = [[(bytes(h[0] or b""), h[1]) for h in hs] if hs else None for hs in headers]
    timestamps = batch.timestamps if batch.deltas is not None else None
    return encode_record_batch(batch.offset, batch.next_offset - batch.offset - 1,
                               batch.base_timestamp, timestamps, batch.keys,
                               list(batch.values), kheaders)


def record_offset(batch_offset: int, index: int) -> int:
    """The Kafka offset of message ``index`` of the batch at ``batch_offset``."""
    return batch_offset + index


__all__ = ["STORED_CODEC", "record_offset", "to_kafka", "to_logferry"]
