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
from broker.kafka.varint import read_varint, varint_size, write_varint
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
    pos = 0
    end = len(view)
    base_ts = batch.base_timestamp
    timestamps, keys, values = batch.timestamps, batch.keys, batch.values
    headers, deltas = batch.headers, batch.offset_deltas
    try:
        for _ in range(count):
            length, pos = read_varint(view, pos)
            stop = pos + length
            if length < 0 or stop > end:
                raise CorruptBatchError("record length runs past its batch")
            pos += 1  # attributes (unused)
            ts_delta, pos = read_varint(view, pos)
            offset_delta, pos = read_varint(view, pos)
            key, pos = _read_bytes(view, pos, stop)
            value, pos = _read_bytes(view, pos, stop)
            nheaders, pos = read_varint(view, pos)
            if nheaders < 0 or nheaders > stop - pos:
                raise CorruptBatchError("record has a bad header count")
            record_headers: list[Header] = []
            for _ in range(nheaders):
                hkey, pos = _read_bytes(view, pos, stop)
                hvalue, pos = _read_bytes(view, pos, stop)
                if hkey is None:
                    raise CorruptBatchError("record header has a null key")
                record_headers.append((hkey, hvalue))
            if pos != stop:
                raise CorruptBatchError("record length does not match its fields")
            timestamps.append(base_ts + ts_delta)
            keys.append(key)
            values.append(value)
            headers.append(record_headers)
            deltas.append(offset_delta)
    except CorruptBatchError as exc:
        raise CorruptBatchError(f"record batch at byte {at}: {exc}") from None
    if pos != end:
        raise CorruptBatchError(f"record batch at byte {at}: {end - pos} bytes follow its "
                                f"{count} records")


def _read_bytes(view: memoryview, pos: int, stop: int) -> tuple[bytes | None, int]:
    size, pos = read_varint(view, pos)
    if size < 0:
        return None, pos
    if pos + size > stop:
        raise CorruptBatchError("record field runs past its record")
    return bytes(view[pos:pos + size]), pos + size


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
    """
    out = bytearray(HEADER_SIZE)
    append = out.append
    extend = out.extend
    for i, value in enumerate(values):
        key = keys[i] if keys is not None else None
        ts_delta = timestamps[i] - base_timestamp if timestamps is not None else 0
        hdrs = headers[i] if headers is not None else None
        vlen = -1 if value is None else len(value)
        klen = -1 if key is None else len(key)
        size = (1 + varint_size(ts_delta) + varint_size(i) + varint_size(klen) + max(klen, 0)
                + varint_size(vlen) + max(vlen, 0))
        if hdrs:
            size += varint_size(len(hdrs))
            for hk, hv in hdrs:
                hvlen = -1 if hv is None else len(hv)
                size += varint_size(len(hk)) + len(hk) + varint_size(hvlen) + max(hvlen, 0)
        else:
            size += 1
        write_varint(out, size)
        append(0)
        write_varint(out, ts_delta)
        write_varint(out, i)
        write_varint(out, klen)
        if key is not None:
            extend(key)
        write_varint(out, vlen)
        if value is not None:
            extend(value)
        if hdrs:
            write_varint(out, len(hdrs))
            for hk, hv in hdrs:
                write_varint(out, len(hk))
                extend(hk)
                if hv is None:
                    write_varint(out, -1)
                else:
                    write_varint(out, len(hv))
                    extend(hv)
        else:
            append(0)
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
