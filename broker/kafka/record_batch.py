"""Kafka record batches v2 (magic 2): decode what Kafka producers send, encode what
Kafka consumers fetch.

Layout (big-endian; Kafka's ``DefaultRecordBatch``)::

    base_offset i64, batch_length i32 (bytes after this field), partition_leader_epoch i32,
    magic i8 (2), crc u32 (CRC32C of attributes..end), attributes i16, last_offset_delta i32,
    base_timestamp i64, max_timestamp i64, producer_id i64, producer_epoch i16,
    base_sequence i32, record_count i32, records (compressed as a whole by attributes & 7)

    record: length varint, attributes i8, timestamp_delta varlong, offset_delta varint,
            key (varint length, -1 null), value (likewise), header count varint,
            headers (key: varint length + UTF-8, value: varint length, -1 null)

CRC32C comes from the ``crc32c`` package (hardware accelerated); gzip, lz4 and zstd
from :mod:`broker.wire.codecs` (bounded decompression), snappy from ``cramjam``
(raw blocks as librdkafka writes them, or the xerial framing of the Java and
kafka-python clients).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import cramjam
import crc32c as _crc32c_mod

from broker.common.errors import CorruptBatchError
from broker.kafka.varint import read_varint, write_varint
from broker.wire import codecs

BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
"""base_offset .. record_count (see the module docstring); 61 bytes."""
HEADER_SIZE = BATCH_HEADER.size
LOG_OVERHEAD = 12  # base_offset + batch_length: the bytes not counted by batch_length
CRC_START = 21  # attributes: the first byte the CRC covers
MAGIC = 2

COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_SNAPPY = 0, 1, 2
COMPRESSION_LZ4, COMPRESSION_ZSTD = 3, 4
COMPRESSION_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
TIMESTAMP_LOG_APPEND = 0x08
TRANSACTIONAL = 0x10
CONTROL = 0x20

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_crc32c = _crc32c_mod.crc32c
_unpack_header = BATCH_HEADER.unpack_from
_pack_header_into = BATCH_HEADER.pack_into

Header = tuple[bytes, "bytes | None"]


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
    view = memoryview(buf)
    end = len(view)
    pos = 0
    out: list[KafkaBatch] = []
    while pos < end:
        if end - pos < HEADER_SIZE:
            raise CorruptBatchError(f"record batch header torn at byte {pos} "
                                    f"({end - pos} bytes left, {HEADER_SIZE} needed)")
        (base_offset, length, _epoch, magic, crc, attributes, last_delta, base_ts, max_ts,
         pid, pepoch, base_seq, count) = _unpack_header(view, pos)
        if magic != MAGIC:
            raise CorruptBatchError(f"record batch at byte {pos} has magic {magic}: only "
                                    "record batches v2 (magic 2) are accepted")
        stop = pos + LOG_OVERHEAD + length
        if length < HEADER_SIZE - LOG_OVERHEAD or stop > end:
            raise CorruptBatchError(f"record batch at byte {pos} claims {length} bytes; "
                                    f"{end - pos - LOG_OVERHEAD} follow")
        if _crc32c(view[pos + CRC_START:stop]) != crc:
            raise CorruptBatchError(f"record batch at byte {pos} fails its CRC32C")
        if count < 0 or last_delta < 0:
            raise CorruptBatchError(f"record batch at byte {pos} has a negative count")
        batch = KafkaBatch(base_offset, attributes, base_ts, max_ts, pid, pepoch, base_seq,
                           last_delta)
        body: bytes | memoryview = view[pos + HEADER_SIZE:stop]
        codec = attributes & 0x07
        if codec != COMPRESSION_NONE:
            body = decompress(codec, body, pos)
        _decode_records(memoryview(body), count, batch, pos)
        out.append(batch)
        pos = stop
    return out


def decompress(codec: int, body: bytes | memoryview, at: int) -> bytes | memoryview:
    """The records of a compressed batch; CorruptBatchError for an unknown codec or
    bytes that do not decompress."""
    if codec == COMPRESSION_SNAPPY:
        try:
            raw = bytes(body)
            if raw.startswith(_XERIAL_MAGIC):
                return _unxerial(raw)
            return bytes(cramjam.snappy.decompress_raw(raw))
        except Exception as exc:  # cramjam raises its own error types
            raise CorruptBatchError(f"record batch at byte {at}: snappy data does not "
                                    f"decompress: {exc}") from None
    if codec in (COMPRESSION_GZIP, COMPRESSION_LZ4, COMPRESSION_ZSTD):
        return codecs.decompress(codec, body, at)
    raise CorruptBatchError(f"record batch at byte {at} uses compression codec {codec}; "
                            f"known: {COMPRESSION_NAMES}")


def _unxerial(raw: bytes) -> bytes:
    """Snappy in the xerial framing: a 16-byte header, then (u32 length, block)*."""
    pos = 16
    out = bytearray()
    while pos < len(raw):
        (size,) = struct.unpack_from(">i", raw, pos)
        pos += 4
        out += cramjam.snappy.decompress_raw(raw[pos:pos + size])
        pos += size
    return bytes(out)


def _decode_records(view: memoryview, count: int, batch: KafkaBatch, at: int) -> None:
    """Fill ``batch``'s columns from its (decompressed) records: one tight loop, with
    the one-byte varints (nearly all of them) decoded inline."""
    buf = bytes(view)
    pos = 0
    end = len(buf)
    base_ts = batch.base_timestamp
    timestamps, keys, values = batch.timestamps, batch.keys, batch.values
    headers, deltas = batch.headers, batch.offset_deltas
    add_ts, add_key, add_value = timestamps.append, keys.append, values.append
    add_headers, add_delta = headers.append, deltas.append
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
            if b == 1:  # null key
                key = None
                pos += 1
            else:
                size, pos = read_varint(buf, pos)
                if size < 0 or pos + size > stop:
                    raise CorruptBatchError("record key runs past its record")
                key = buf[pos:pos + size]
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
            if size < 0:
                value = None
            else:
                if pos + size > stop:
                    raise CorruptBatchError("record value runs past its record")
                value = buf[pos:pos + size]
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
        raise CorruptBatchError(f"record batch at byte {at}: a record runs past the "
                                "batch's end") from None
    except CorruptBatchError as exc:
        raise CorruptBatchError(f"record batch at byte {at}: {exc}") from None
    if pos != end:
        raise CorruptBatchError(f"record batch at byte {at}: {end - pos} bytes follow its "
                                f"{count} records")


def _read_bytes(buf: bytes, pos: int, stop: int) -> tuple[bytes | None, int]:
    size, pos = read_varint(buf, pos)
    if size < 0:
        return None, pos
    if pos + size > stop:
        raise CorruptBatchError("record field runs past its record")
    return buf[pos:pos + size], pos + size


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


def encode_record_batch(base_offset: int, last_offset_delta: int, base_timestamp: int,
                        timestamps: list[int] | None, keys: list[bytes | None] | None,
                        values: list[bytes | None],
                        headers: list[list[Header] | None] | None = None,
                        max_timestamp: int | None = None) -> bytearray:
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
        head = zero + (table[ts_delta] if 0 <= ts_delta < 16384 else varint(ts_delta)) \
            + (table[i] if i < 16384 else varint(i))
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
    _pack_header_into(out, 0, base_offset, len(out) - LOG_OVERHEAD, -1, MAGIC, 0, 0,
                      last_offset_delta, base_timestamp, max_timestamp, -1, -1, -1,
                      len(values))
    struct.pack_into(">I", out, 17, _crc32c(memoryview(out)[CRC_START:]))
    return out


__all__ = [
    "BATCH_HEADER", "COMPRESSION_NAMES", "HEADER_SIZE", "KafkaBatch", "MAGIC",
    "decode_record_batches", "decompress", "encode_record_batch",
]
