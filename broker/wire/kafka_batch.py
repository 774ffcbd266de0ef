"""Kafka record batches v2 (magic 2): their layout and their records, sans-IO.

A broker stores a Kafka producer's record batch as it arrived, inside logferry's own
framing (the stored batch format magic 3, :mod:`broker.wire.records`), so every reader
of a log meets Kafka's layout: the broker reads its header (per batch), logferry's
clients decode its records (per message, on the client). This module needs no optional
dependency: CRC32C is the Kafka listener's business (:mod:`broker.server.kafka.record_batch`),
a stored batch is covered by logferry's own CRC; snappy needs ``cramjam`` (the ``kafka``
extra) and only a batch that uses it asks for it.

Layout (big-endian; Kafka's ``DefaultRecordBatch``)::

    base_offset i64, batch_length i32 (bytes after this field), partition_leader_epoch i32,
    magic i8 (2), crc u32 (CRC32C of attributes..end), attributes i16, last_offset_delta i32,
    base_timestamp i64, max_timestamp i64, producer_id i64, producer_epoch i16,
    base_sequence i32, record_count i32, records (compressed as a whole by attributes & 7)

    record: length varint, attributes i8, timestamp_delta varlong, offset_delta varint,
            key (varint length, -1 null), value (likewise), header count varint,
            headers (key: varint length + UTF-8, value: varint length, -1 null)

``base_offset`` and ``partition_leader_epoch`` lie outside the CRC: a broker sets them
without touching the rest.
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

from broker.common.errors import ConfigError, CorruptBatchError
from broker.wire import codecs

KAFKA_HEADER = struct.Struct(">qiibIhiqqqhii")
"""base_offset .. record_count (see the module docstring); 61 bytes."""
KAFKA_HEADER_SIZE = KAFKA_HEADER.size
LOG_OVERHEAD = 12
"""base_offset + batch_length: the bytes ``batch_length`` does not count."""
KAFKA_MAGIC = 2
BASE_OFFSET = struct.Struct(">q")
"""At byte 0: outside the CRC, set by whoever serves the batch."""
CRC_AT = 17
"""The CRC32C field."""
KAFKA_CRC_START = 21
"""attributes: the first byte the CRC32C covers."""
LAST_OFFSET_DELTA = struct.Struct(">i")
LAST_OFFSET_DELTA_AT = 23
PRODUCER_AT = 43
"""producer_id i64, producer_epoch i16, base_sequence i32 (logferry's PRODUCER_FIELDS)."""

COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_SNAPPY = 0, 1, 2
COMPRESSION_LZ4, COMPRESSION_ZSTD = 3, 4
COMPRESSION_MASK = 0x07
COMPRESSION_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
TIMESTAMP_LOG_APPEND = 0x08
TRANSACTIONAL = 0x10
CONTROL = 0x20

_XERIAL_MAGIC = b"\x82SNAPPY\x00"

Header = tuple[bytes, "bytes | None"]


class Records(NamedTuple):
    """The records of one batch as columns."""

    timestamps: list[int]
    """Absolute milliseconds, one per record."""
    keys: list[bytes | None]
    values: list[bytes | None]
    headers: list[list[Header]]
    offset_deltas: list[int]


def records_of(view: memoryview, at: int = 0) -> Records:
    """The records of the whole Kafka batch ``view`` (its header already checked by
    the caller): decompressed, then decoded. ``at`` names its position in messages."""
    (_, _, _, _, _, attributes, _, base_ts, max_ts, _, _, _, count) = KAFKA_HEADER.unpack_from(view, 0)
    body: bytes | memoryview = view[KAFKA_HEADER_SIZE:]
    codec = attributes & COMPRESSION_MASK
    if codec != COMPRESSION_NONE:
        body = decompress(codec, body, at)
    out = decode_records(memoryview(body), count, base_ts, at)
    if attributes & TIMESTAMP_LOG_APPEND:  # Kafka's rule: every record has max_timestamp
        out.timestamps[:] = [max_ts] * len(out.timestamps)
    return out


def decompress(codec: int, body: bytes | memoryview, at: int) -> bytes | memoryview:
    """The records of a compressed batch; CorruptBatchError for an unknown codec or
    bytes that do not decompress. Snappy (raw blocks as librdkafka writes them, or the
    xerial framing of the Java and kafka-python clients) needs ``cramjam``."""
    if codec == COMPRESSION_SNAPPY:
        try:
            import cramjam
        except ImportError:
            raise ConfigError(
                f"record batch at byte {at} is snappy-compressed (a Kafka producer's); "
                "reading it needs cramjam: pip install 'logferry[kafka]'"
            ) from None
        try:
            raw = bytes(body)
            if raw.startswith(_XERIAL_MAGIC):
                return _unxerial(raw, cramjam)
            return bytes(cramjam.snappy.decompress_raw(raw))
        except Exception as exc:  # cramjam raises its own error types
            raise CorruptBatchError(f"record batch at byte {at}: snappy data does not decompress: {exc}") from None
    if codec in (COMPRESSION_GZIP, COMPRESSION_LZ4, COMPRESSION_ZSTD):
        return codecs.decompress(codec, body, at)
    raise CorruptBatchError(f"record batch at byte {at} uses compression codec {codec}; known: {COMPRESSION_NAMES}")


def _unxerial(raw: bytes, cramjam: Any) -> bytes:
    """Snappy in the xerial framing: a 16-byte header, then (u32 length, block)*."""
    pos = 16
    out = bytearray()
    while pos < len(raw):
        (size,) = struct.unpack_from(">i", raw, pos)
        pos += 4
        out += cramjam.snappy.decompress_raw(raw[pos : pos + size])
        pos += size
    return bytes(out)


CONTROL_ABORT, CONTROL_COMMIT = 0, 1
"""A control record's type (its key: version i16, type i16): a transaction's end."""
_CONTROL_KEY = struct.Struct(">hh")


def control_type(batch: bytes | bytearray | memoryview, pos: int = 0) -> int:
    """The type of the control record in the control batch at ``pos`` (a Kafka record
    batch v2 with the CONTROL attribute): :data:`CONTROL_COMMIT` or
    :data:`CONTROL_ABORT` for a transaction marker. One record read, never
    compressed (Kafka's rule). CorruptBatchError if it cannot be read."""
    at = pos + KAFKA_HEADER_SIZE
    _, at = read_varint(batch, at)  # record length
    at += 1  # record attributes
    _, at = read_varint(batch, at)  # timestamp delta
    _, at = read_varint(batch, at)  # offset delta
    key_length, at = read_varint(batch, at)
    if key_length < _CONTROL_KEY.size or at + _CONTROL_KEY.size > len(batch):
        raise CorruptBatchError(f"control record at byte {pos} has a key of {key_length} bytes, not a marker's 4")
    _, kind = _CONTROL_KEY.unpack_from(batch, at)
    return int(kind)


def read_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """A zig-zag varint (Kafka's varint and varlong) at ``pos``: (value, next position).

    Raises CorruptBatchError when the buffer ends inside it or it runs past 10 bytes.
    The one reader of varints (the broker's Kafka codec writes them: its ``varint``)."""
    shift = 0
    raw = 0
    try:
        while True:
            b = buf[pos]
            pos += 1
            raw |= (b & 0x7F) << shift
            if b < 0x80:
                return (raw >> 1) ^ -(raw & 1), pos
            shift += 7
            if shift > 63:
                raise CorruptBatchError("varint longer than 10 bytes")
    except IndexError:
        raise CorruptBatchError("record batch ends inside a varint") from None


def decode_records(view: memoryview, count: int, base_ts: int, at: int) -> Records:
    """The columns of ``count`` (decompressed) records: one tight loop, with the
    one- and two-byte varints (nearly all of them) decoded inline."""
    buf = bytes(view)
    pos = 0
    end = len(buf)
    out = Records([], [], [], [], [])
    add_ts, add_key, add_value = out.timestamps.append, out.keys.append, out.values.append
    add_headers, add_delta = out.headers.append, out.offset_deltas.append
    no_headers: list[Header] = []
    try:
        for _ in range(count):
            b = buf[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            elif buf[pos + 1] < 0x80:  # two bytes: records up to 8 KiB
                raw = (b & 0x7F) | (buf[pos + 1] << 7)
                length = (raw >> 1) ^ -(raw & 1)
                pos += 2
            else:
                length, pos = read_varint(buf, pos)
            stop = pos + length
            if length < 0 or stop > end:
                raise CorruptBatchError("record length runs past its batch")
            pos += 1  # attributes (unused)
            b = buf[pos]
            if b < 0x80:
                ts_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            elif buf[pos + 1] < 0x80:
                raw = (b & 0x7F) | (buf[pos + 1] << 7)
                ts_delta = (raw >> 1) ^ -(raw & 1)
                pos += 2
            else:
                ts_delta, pos = read_varint(buf, pos)
            b = buf[pos]
            if b < 0x80:
                offset_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            elif buf[pos + 1] < 0x80:
                raw = (b & 0x7F) | (buf[pos + 1] << 7)
                offset_delta = (raw >> 1) ^ -(raw & 1)
                pos += 2
            else:
                offset_delta, pos = read_varint(buf, pos)
            b = buf[pos]
            key: bytes | None
            if b == 1:  # null key
                key = None
                pos += 1
            else:
                size, pos = read_varint(buf, pos)
                if size < 0 or pos + size > stop:
                    raise CorruptBatchError("record key runs past its record")
                key = buf[pos : pos + size]
                pos += size
            b = buf[pos]
            if b < 0x80:
                size = (b >> 1) ^ -(b & 1)
                pos += 1
            elif buf[pos + 1] < 0x80:
                raw = (b & 0x7F) | (buf[pos + 1] << 7)
                size = (raw >> 1) ^ -(raw & 1)
                pos += 2
            else:
                size, pos = read_varint(buf, pos)
            value: bytes | None
            if size < 0:
                value = None
            else:
                if pos + size > stop:
                    raise CorruptBatchError("record value runs past its record")
                value = buf[pos : pos + size]
                pos += size
            if buf[pos] == 0 and pos + 1 == stop:  # no headers: the common case
                pos = stop
                add_headers(no_headers)
            else:
                nheaders, pos = read_varint(buf, pos)
                if nheaders < 0 or nheaders > stop - pos:
                    raise CorruptBatchError("record has a bad header count")
                record_headers: list[Header] = []
                for _ in range(nheaders):
                    hkey, pos = _read_bytes(buf, pos, stop)
                    hvalue, pos = _read_bytes(buf, pos, stop)
                    if hkey is None:
                        raise CorruptBatchError("record header has a null key")
                    record_headers.append((hkey, hvalue))
                if pos != stop:
                    raise CorruptBatchError("record length does not match its fields")
                add_headers(record_headers)
            add_ts(base_ts + ts_delta)
            add_key(key)
            add_value(value)
            add_delta(offset_delta)
    except IndexError:
        raise CorruptBatchError(f"record batch at byte {at}: a record runs past the batch's end") from None
    except CorruptBatchError as exc:
        raise CorruptBatchError(f"record batch at byte {at}: {exc}") from None
    if pos != end:
        raise CorruptBatchError(f"record batch at byte {at}: {end - pos} bytes follow its {count} records")
    return out


def _read_bytes(buf: bytes, pos: int, stop: int) -> tuple[bytes | None, int]:
    size, pos = read_varint(buf, pos)
    if size < 0:
        return None, pos
    if pos + size > stop:
        raise CorruptBatchError("record field runs past its record")
    return buf[pos : pos + size], pos + size


__all__ = [
    "control_type",
    "BASE_OFFSET",
    "COMPRESSION_NAMES",
    "CONTROL",
    "CONTROL_ABORT",
    "CONTROL_COMMIT",
    "CRC_AT",
    "KAFKA_CRC_START",
    "KAFKA_HEADER",
    "KAFKA_HEADER_SIZE",
    "KAFKA_MAGIC",
    "LAST_OFFSET_DELTA",
    "LAST_OFFSET_DELTA_AT",
    "LOG_OVERHEAD",
    "PRODUCER_AT",
    "Records",
    "TIMESTAMP_LOG_APPEND",
    "TRANSACTIONAL",
    "decode_records",
    "decompress",
    "read_varint",
    "records_of",
]
