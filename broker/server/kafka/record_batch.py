"""Kafka record batches v2 (magic 2) on the Kafka listener: check what Kafka producers
send (CRC32C, per batch), decode them (tests, tools), encode what Kafka consumers fetch
from agents' and native producers' batches.

The layout and the record decoder live in :mod:`broker.wire.kafka_batch` (sans-IO, no
optional dependency), because logferry's clients decode the Kafka batches a broker
stores as they arrived. CRC32C comes from the ``crc32c`` package (hardware
accelerated); codecs from :mod:`broker.wire.kafka_batch`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

import crc32c as _crc32c_mod

from broker.common.errors import CorruptBatchError, MessageTooLargeError
from broker.server.kafka.varint import write_varint
from broker.wire.kafka_batch import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NAMES,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    CONTROL,
    KAFKA_CRC_START,
    KAFKA_HEADER,
    KAFKA_MAGIC,
    LOG_OVERHEAD,
    TIMESTAMP_LOG_APPEND,
    TRANSACTIONAL,
    Header,
    decompress,
    records_of,
)

BATCH_HEADER = KAFKA_HEADER
"""base_offset .. record_count (see the module docstring); 61 bytes."""
HEADER_SIZE = BATCH_HEADER.size
CRC_START = KAFKA_CRC_START  # attributes: the first byte the CRC covers
MAGIC = KAFKA_MAGIC

_crc32c = _crc32c_mod.crc32c
_unpack_header = BATCH_HEADER.unpack_from
_pack_header_into = BATCH_HEADER.pack_into


@dataclass(slots=True)
class KafkaBatch:
    """One decoded record batch: its header fields and its records as columns."""

    base_offset: int
    attributes: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_offset_delta: int
    timestamps: list[int] = field(default_factory=list)
    """Absolute milliseconds, one per record."""
    keys: list[bytes | None] = field(default_factory=list)
    values: list[bytes | None] = field(default_factory=list)
    headers: list[list[Header]] = field(default_factory=list)
    offset_deltas: list[int] = field(default_factory=list)

    @property
    def compression(self) -> int:
        """The codec id of the records (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd)."""
        return self.attributes & 0x07

    @property
    def is_control(self) -> bool:
        """A transaction marker, not data."""
        return bool(self.attributes & CONTROL)


def decode_record_batches(buf: bytes | memoryview) -> list[KafkaBatch]:
    """Every batch in a produce request's ``records`` field; CorruptBatchError if any
    batch is torn, not magic 2, fails its CRC32C or holds malformed records."""
    out: list[KafkaBatch] = []
    for pos, batch in iter_checked(buf):
        (base_offset, _, _, _, _, attributes, last_delta, base_ts, max_ts, pid, pepoch, base_seq, _) = _unpack_header(
            batch, 0
        )
        records = records_of(batch, pos)
        out.append(
            KafkaBatch(
                base_offset,
                attributes,
                base_ts,
                max_ts,
                pid,
                pepoch,
                base_seq,
                last_delta,
                records.timestamps,
                records.keys,
                records.values,
                records.headers,
                records.offset_deltas,
            )
        )
    return out


def iter_checked(buf: bytes | memoryview, max_batch_bytes: int | None = None) -> Iterator[tuple[int, memoryview]]:
    """``(position, bytes)`` of each record batch in ``buf``, its header and CRC32C
    checked (per batch: no record is read); CorruptBatchError if one is torn, not
    magic 2, fails its CRC32C or claims a negative count; MessageTooLargeError if one
    is longer than ``max_batch_bytes`` (Kafka's ``message.max.bytes``, which counts the
    whole batch, its 12-byte offset and length included, and is checked before the
    CRC32C as Kafka does)."""
    view = memoryview(buf)
    end = len(view)
    pos = 0
    while pos < end:
        if end - pos < HEADER_SIZE:
            raise CorruptBatchError(
                f"record batch header torn at byte {pos} ({end - pos} bytes left, {HEADER_SIZE} needed)"
            )
        (_, length, _, magic, crc, _, last_delta, _, _, _, _, _, count) = _unpack_header(view, pos)
        if magic != MAGIC:
            raise CorruptBatchError(
                f"record batch at byte {pos} has magic {magic}: only record batches v2 (magic 2) are accepted"
            )
        stop = pos + LOG_OVERHEAD + length
        if length < HEADER_SIZE - LOG_OVERHEAD or stop > end:
            raise CorruptBatchError(
                f"record batch at byte {pos} claims {length} bytes; {end - pos - LOG_OVERHEAD} follow"
            )
        if max_batch_bytes is not None and stop - pos > max_batch_bytes:
            raise MessageTooLargeError(
                f"record batch of {stop - pos} bytes is over the broker's max_message_bytes "
                f"({max_batch_bytes}): send smaller batches or raise [broker] max_message_bytes"
            )
        if _crc32c(view[pos + CRC_START : stop]) != crc:
            raise CorruptBatchError(f"record batch at byte {pos} fails its CRC32C")
        if count < 0 or last_delta < 0:
            raise CorruptBatchError(f"record batch at byte {pos} has a negative count")
        yield pos, view[pos:stop]
        pos = stop


def set_crc(batch: bytearray) -> None:
    """Recompute the CRC32C of the whole record batch ``batch`` after a change to a
    field it covers (per batch, one hardware-accelerated pass)."""
    struct.pack_into(">I", batch, 17, _crc32c(memoryview(batch)[CRC_START:]))


def set_crc_at(buf: bytearray, start: int, stop: int) -> None:
    """:func:`set_crc` for the record batch at ``buf[start:stop]``, in place (a fetch
    buffer holding several batches)."""
    struct.pack_into(">I", buf, start + 17, _crc32c(memoryview(buf)[start + CRC_START : stop]))


def _zigzag_table(limit: int) -> list[bytes]:
    out = []
    for n in range(limit):
        buf = bytearray()
        write_varint(buf, n)
        out.append(bytes(buf))
    return out


_VARINTS = _zigzag_table(1 << 14)
"""Zig-zag varints of 0..16383, ready to join: lengths, indexes and time deltas."""
_NULL = b"\x01"  # varint -1: a null key or value


def _varint(n: int) -> bytes:
    if 0 <= n < 16384:
        return _VARINTS[n]
    out = bytearray()
    write_varint(out, n)
    return bytes(out)


def encode_record_batch(
    base_offset: int,
    last_offset_delta: int,
    base_timestamp: int,
    timestamps: list[int] | None,
    keys: list[bytes | None] | None,
    values: list[bytes | None],
    headers: list[list[Header] | None] | None = None,
    max_timestamp: int | None = None,
) -> bytearray:
    """One uncompressed record batch v2 whose records have offsets ``base_offset + i``.

    ``last_offset_delta`` may exceed ``len(values) - 1`` (offsets the batch spans but
    holds no record for, as after compaction): Kafka clients continue at
    ``base_offset + last_offset_delta + 1``. ``timestamps`` None: every record has
    ``base_timestamp``. No producer id (-1): fetched batches are not idempotent ones.
    Records are joined from ready-made pieces (one list, one join): the per-record
    work is a few table lookups.
    """
    parts: list[bytes] = [bytes(HEADER_SIZE)]
    add = parts.append
    varint = _varint
    table = _VARINTS
    zero = b"\x00"
    for i, value in enumerate(values):
        ts_delta = timestamps[i] - base_timestamp if timestamps is not None else 0
        key = keys[i] if keys is not None else None
        hdrs = headers[i] if headers is not None else None
        head = (
            zero
            + (table[ts_delta] if 0 <= ts_delta < 16384 else varint(ts_delta))
            + (table[i] if i < 16384 else varint(i))
        )
        if key is None:
            head += _NULL
        else:
            head += varint(len(key)) + key
        if value is None:
            head += _NULL
            value = b""
        else:
            vlen = len(value)
            head += table[vlen] if vlen < 16384 else varint(vlen)
        if hdrs:
            tail = bytearray()
            write_varint(tail, len(hdrs))
            for hk, hv in hdrs:
                write_varint(tail, len(hk))
                tail += hk
                if hv is None:
                    tail += _NULL
                else:
                    write_varint(tail, len(hv))
                    tail += hv
            trailer = bytes(tail)
        else:
            trailer = zero
        size = len(head) + len(value) + len(trailer)
        add((table[size] if size < 16384 else varint(size)) + head)
        add(value)
        add(trailer)
    out = bytearray(b"".join(parts))
    if max_timestamp is None:
        max_timestamp = max(timestamps) if timestamps else base_timestamp
    _pack_header_into(
        out,
        0,
        base_offset,
        len(out) - LOG_OVERHEAD,
        -1,
        MAGIC,
        0,
        0,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        -1,
        -1,
        -1,
        len(values),
    )
    struct.pack_into(">I", out, 17, _crc32c(memoryview(out)[CRC_START:]))
    return out


__all__ = [
    "BATCH_HEADER",
    "COMPRESSION_GZIP",
    "COMPRESSION_LZ4",
    "COMPRESSION_NAMES",
    "COMPRESSION_NONE",
    "COMPRESSION_SNAPPY",
    "COMPRESSION_ZSTD",
    "CONTROL",
    "HEADER_SIZE",
    "KafkaBatch",
    "LOG_OVERHEAD",
    "MAGIC",
    "TIMESTAMP_LOG_APPEND",
    "TRANSACTIONAL",
    "decode_record_batches",
    "decompress",
    "encode_record_batch",
    "iter_checked",
    "set_crc",
    "set_crc_at",
]
