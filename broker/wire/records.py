"""The batch (message set) format: the unit of append, transfer, CRC and compression.

A batch is written by a producer, stored by the broker byte for byte, and decoded by
consumers. The broker never decodes the messages inside; it walks batch headers and
checks each batch's CRC (zlib, in C), which is the only per-batch work on its hot path.

Layout (big-endian), declared once in :data:`BATCH_HEADER`::

    length          u32  bytes after this field: 18 + len(payload) (32 + ... at magic 2)
    magic           u8   format version: 1, or 2 for a batch of an idempotent producer
    crc             u32  zlib.crc32 of everything after this field (attributes..payload)
    attributes      u8   bits 0-2: compression codec (0 none, 1 gzip, 3 lz4, 4 zstd:
                         :mod:`broker.wire.codecs`); bits 3-7 zero
    count           u32  number of messages in the batch
    base_timestamp  i64  milliseconds since the epoch of the batch's first message
    payload         msgpack array [keys, values, deltas(, headers)], compressed by the codec

Magic 2 (:data:`BATCH_HEADER_V2`) inserts the idempotent producer's identity between
``base_timestamp`` and the payload, covered by the CRC like the rest::

    producer_id     i64  the id the cluster gave the producer (INIT_PRODUCER_ID); -1 none
    producer_epoch  i16  bumped by the producer when it resets its sequences
    base_sequence   i32  sequence number of the batch's first message in its partition;
                         the next batch of the producer there starts at base + count

The first 22 bytes are the same in both versions (so code that reads only length,
magic, count or timestamp works on either), and the fields live inside the batch
bytes: a byte-identical copy of a batch (a follower, the mirror) carries them. Both
versions are read everywhere; a producer writes magic 2 only when it is idempotent.
The broker reads these fields per batch (one struct unpack), never per message.

The payload is columnar so whole batches encode and decode in one msgpack call:
``keys`` is nil when no message has a key, else a list of bytes-or-nil; ``values`` is a
list of bytes; ``deltas`` is nil when every message has ``base_timestamp``, else a list
of millisecond offsets from it; an optional fourth column ``headers`` holds per message
its record headers as ``[key, value]`` pairs, or nil. A 200-byte value costs 2 bytes
of msgpack header, and a delta under 128 ms one byte, so an uncompressed batch of 50
such messages carries about 3.5 bytes of overhead per message, header included.

Magic 3 (:data:`MAGIC_KAFKA`) is a Kafka producer's record batch v2 stored as it arrived
(:mod:`broker.wire.kafka_batch`, docs/kafka.md), behind the same 22-byte header: ``crc``
is zlib.crc32 of attributes..end as above, ``attributes`` is 0 (the Kafka batch names
its own codec), ``count`` and ``base_timestamp`` are copied from the Kafka header, so
every reader of headers (offsets, time index, recovery, retention, replication) treats it
like the others. The Kafka batch's own producer fields are the idempotence fields. Only
clients decode its records (:func:`decode_batches`).

A batch's offset is the logical byte position of its first byte in the partition;
the next batch starts at ``offset + 4 + length``.
"""

from __future__ import annotations

import mmap
import struct
import threading
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import msgpack

from broker.common.errors import CorruptBatchError
from broker.wire import kafka_batch
from broker.wire.codecs import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_MASK,
    CODEC_NAMES,
    CODEC_NONE,
    CODEC_ZSTD,
    CODECS,
    compress,
    decompress,
)

BATCH_HEADER = struct.Struct(">IBIBIq")
"""length, magic, crc, attributes, count, base_timestamp (see module docstring)."""

HEADER_SIZE = BATCH_HEADER.size  # 22
LENGTH_SIZE = 4
CRC_START = 9  # first byte covered by the CRC: attributes
MAGIC = 1
MAGIC_V2 = 2
BATCH_HEADER_V2 = struct.Struct(">IBIBIqqhi")
"""Magic 2: the fields of :data:`BATCH_HEADER`, then producer_id, producer_epoch,
base_sequence."""
HEADER_SIZE_V2 = BATCH_HEADER_V2.size  # 36
PRODUCER_FIELDS = struct.Struct(">qhi")
"""producer_id, producer_epoch, base_sequence: at byte :data:`HEADER_SIZE` of a magic 2 batch."""
MAGIC_KAFKA = 3
"""A Kafka record batch v2 behind the 22-byte header (see the module docstring)."""
KAFKA_AT = HEADER_SIZE
"""Where the Kafka batch starts in a stored magic 3 batch."""
MIN_LENGTH = {
    MAGIC: HEADER_SIZE - LENGTH_SIZE,
    MAGIC_V2: HEADER_SIZE_V2 - LENGTH_SIZE,
    MAGIC_KAFKA: HEADER_SIZE - LENGTH_SIZE + kafka_batch.KAFKA_HEADER_SIZE,
}
"""Smallest legal length field per magic (a batch with an empty payload)."""
NO_PRODUCER = -1
"""producer_id of a magic 2 batch written without an id."""
SEQUENCE_MODULUS = 1 << 31
"""Sequence numbers wrap from 2**31 - 1 to 0 (base_sequence is a signed 32-bit int)."""
_CODEC_MASK = CODEC_MASK
MAX_BATCH_BYTES = 256 * 1024 * 1024
"""No batch may claim to be longer than this; a larger length means a corrupt header."""

_pack = msgpack.Packer(use_bin_type=True, autoreset=True).pack
_header_pack_into = BATCH_HEADER.pack_into
_header_unpack_from = BATCH_HEADER.unpack_from
_producer_unpack_from = PRODUCER_FIELDS.unpack_from
try:  # the same CRC-32, about 10x faster than zlib's (pyproject.toml: isal)
    from isal.isal_zlib import crc32 as _crc32
except ImportError:  # pragma: no cover
    _crc32 = zlib.crc32
batch_crc32: Callable[..., int] = _crc32
"""The batch header's CRC-32 (zlib's polynomial): ``batch_crc32(data[, start])``; code
outside this module that builds a batch header computes it with this one."""
_KAFKA_PRODUCER_AT = KAFKA_AT + kafka_batch.PRODUCER_AT
_kafka_unpack_from = kafka_batch.KAFKA_HEADER.unpack_from


class ProducerInfo(NamedTuple):
    """The producer fields of one magic 2 batch, where it lies in a message set."""

    position: int
    """Byte position of the batch in the buffer that was scanned."""
    producer_id: int
    """The producer's id (:data:`NO_PRODUCER`: none)."""
    epoch: int
    """The producer's epoch."""
    base_sequence: int
    """Sequence number of the batch's first message."""
    count: int  # type: ignore[assignment]  # a field named like tuple.count
    """Messages in the batch (its last sequence is base_sequence + count - 1)."""
    size: int
    """Bytes of the whole batch (length field included)."""


def encode_batch(
    values: Sequence[bytes],
    keys: Sequence[bytes | None] | None,
    timestamps: Sequence[int] | int,
    codec: int = CODEC_NONE,
    producer: tuple[int, int, int] | None = None,
    headers: Sequence[Sequence[Sequence[bytes | None]] | None] | None = None,
) -> bytes:
    """Encode one batch of messages.

    ``timestamps`` is either one millisecond timestamp shared by every message or a
    sequence with one per message; ``keys`` is None when no message has a key.
    ``producer`` is ``(producer_id, epoch, base_sequence)`` for a magic 2 batch.
    ``headers``, per message its record headers (``[[key, value], ...]`` or None), adds
    the payload's fourth column (:attr:`Batch.headers`); None leaves it out.
    """
    count = len(values)
    if count == 0:
        raise ValueError("a batch needs at least one message")
    if isinstance(timestamps, int):
        base = timestamps
        deltas = None
    else:
        base = timestamps[0]
        deltas = None if timestamps.count(base) == count else [t - base for t in timestamps]
    if headers is not None and len(headers) != count:
        raise ValueError(f"headers has {len(headers)} items for {count} messages")
    return bytes(encode_batch_deltas(values, keys, base, deltas, codec, producer=producer, headers=headers))


def encode_batch_deltas(
    values: Sequence[bytes],
    keys: Sequence[bytes | None] | None,
    base: int,
    deltas: Sequence[int] | None,
    codec: int = CODEC_NONE,
    buffer_for: Callable[[int], bytearray] | None = None,
    producer: tuple[int, int, int] | None = None,
    headers: Sequence[Sequence[Sequence[bytes | None]] | None] | None = None,
) -> bytes | bytearray | memoryview:
    """Encode one batch whose timestamps are given as stored: the header's ``base`` and
    the payload's ``deltas`` (None: every message has ``base``).

    The producer keeps its timestamps so (runs of equal milliseconds) and builds the
    deltas in C. Uncompressed, the batch is packed behind room for its header in a
    packer whose buffer is reused and copied out once: each fresh large buffer costs
    page faults, which were most of the time encoding took when the header and payload
    were joined in new buffers. ``buffer_for(n)``, if given, supplies a reused bytearray
    of at least ``n`` bytes to copy into (the result is then a view of it). Small
    batches are made the plain way, as bytes. ``producer``, ``(producer_id, epoch,
    base_sequence)``, makes a magic 2 batch (an idempotent producer's). ``headers``
    (see :func:`encode_batch`) adds the fourth column.
    """
    count = len(values)
    if count == 0:
        raise ValueError("a batch needs at least one message")
    header_size = HEADER_SIZE if producer is None else HEADER_SIZE_V2
    if codec == CODEC_NONE and count >= SMALL_BATCH:
        packer = _header_packer()
        packer.reset()
        # exactly header_size bytes, overwritten below
        packer.pack(_HEADER_ROOM if producer is None else _HEADER_ROOM_V2)
        packer.pack([keys, values, deltas] if headers is None else [keys, values, deltas, headers])
        buf: bytearray | memoryview
        with packer.getbuffer() as packed:
            size = len(packed)
            if buffer_for is None:
                buf = bytearray(packed)
            else:
                # Through a memoryview: a bytearray's own slice assignment copies
                # a buffer into a temporary bytearray first (two copies, not one).
                buf = memoryview(buffer_for(size))[:size]
                buf[:] = packed
        packer.reset()
    else:
        payload = _pack([keys, values, deltas] if headers is None else [keys, values, deltas, headers])
        if codec != CODEC_NONE:
            payload = compress(codec, payload)  # ValueError for an unknown codec
        buf = bytearray(header_size)  # room for the header, packed below
        buf += payload  # one copy (a slice assignment would copy twice)
    if producer is None:
        _header_pack_into(buf, 0, len(buf) - LENGTH_SIZE, MAGIC, 0, codec, count, base)
    else:
        _header_v2_pack_into(buf, 0, len(buf) - LENGTH_SIZE, MAGIC_V2, 0, codec, count, base, *producer)
    struct.pack_into(">I", buf, 5, _crc32(memoryview(buf)[CRC_START:]))
    return buf if count >= SMALL_BATCH and codec == CODEC_NONE else bytes(buf)


def encode_single(value: bytes, ms: int) -> bytes:
    """One keyless message as a whole uncompressed batch (magic 1) stamped ``ms``:
    byte for byte what ``encode_batch_deltas([value], None, ms, None)`` makes.

    The producer's path for batches of one message (``batch_messages=1``), where the
    general encoder's steps (a msgpack call, a header packed into a fresh buffer, a
    copy out) were most of a message's cost: here the bytes before the value
    (attributes, count, timestamp, and the msgpack of ``[nil, [value], nil]`` up to the
    value), their CRC and a struct packing the whole batch are kept for the last
    millisecond and value length, so a message costs two CRC calls over its value and
    one pack.
    """
    size = len(value)
    cached = _single_cache  # one tuple, replaced whole: safe from any thread
    if cached[0] != ms or cached[1] != size:
        cached = _set_single_cache(ms, size)
    return cached[4](cached[5], MAGIC, _crc32(b"\xc0", _crc32(value, cached[3])), cached[2], value, 0xC0)


def _set_single_cache(ms: int, size: int) -> _SingleTemplate:
    global _single_cache
    if size < 0x100:
        head = b"\x93\xc0\x91\xc4" + bytes((size,))
    elif size < 0x10000:
        head = b"\x93\xc0\x91\xc5" + size.to_bytes(2, "big")
    else:
        head = b"\x93\xc0\x91\xc6" + size.to_bytes(4, "big")
    prefix = _single_prefix(CODEC_NONE, 1, ms) + head
    # length, magic, crc, then the CRC-covered bytes: prefix, value, the closing nil
    pack = struct.Struct(f">IBI{len(prefix)}s{size}sB").pack
    _single_cache = (ms, size, prefix, _crc32(prefix), pack, 6 + len(prefix) + size)
    return _single_cache


_SingleTemplate = tuple[int, int, bytes, int, Callable[..., bytes], int]
_single_cache: _SingleTemplate = (-1, -1, b"", 0, struct.Struct("").pack, 0)
"""(ms, value length, the bytes before the value, their CRC, the batch's packer, its
length field) of the last encode_single."""
_single_prefix = struct.Struct(">BIq").pack
"""attributes, count, base_timestamp: the CRC-covered start of a magic 1 header."""


SMALL_BATCH = 64
"""Fewer messages than this are packed the plain way: small buffers are cheap to make,
and the reused packer's extra steps are not."""
_HEADER_ROOM = bytes(HEADER_SIZE - 2)
"""Packed as msgpack bin 8 (2 bytes of type and length, then these): a header's room."""
_HEADER_ROOM_V2 = bytes(HEADER_SIZE_V2 - 2)
"""The same for a magic 2 header."""
_header_v2_pack_into = BATCH_HEADER_V2.pack_into
_packers = threading.local()


def _header_packer() -> msgpack.Packer:
    """This thread's packer for :func:`encode_batch_deltas` (a packer is not thread-safe)."""
    packer: msgpack.Packer | None = getattr(_packers, "packer", None)
    if packer is None:
        packer = _packers.packer = msgpack.Packer(use_bin_type=True, autoreset=False)
    return packer


def compress_batch(raw: bytes | bytearray | memoryview, codec: int) -> bytes | memoryview:
    """One whole stored batch with its payload compressed by ``codec``, if it had none.

    For copying batches across a slow link (the mirror's ``compression``): no msgpack
    work, one compression call and a new header (length, attributes, CRC; count and
    base timestamp kept). A batch that is already compressed, with any codec, or a
    ``codec`` of none, is returned as it is: a batch is never compressed twice, nor
    re-encoded from one codec to another; a Kafka producer's batch (magic 3) keeps the
    codec it came with. Raises CorruptBatchError if ``raw`` is not
    one whole valid batch, ValueError for an unknown ``codec``.
    """
    view = memoryview(raw)
    if len(view) < HEADER_SIZE:
        raise CorruptBatchError(f"not a batch: {len(view)} bytes, a header needs {HEADER_SIZE}")
    length, magic, crc, attributes, count, base = _header_unpack_from(view, 0)
    if magic not in MIN_LENGTH or length < MIN_LENGTH[magic] or LENGTH_SIZE + length != len(view):
        raise CorruptBatchError("not one whole batch: malformed header or length")
    if _crc32(view[CRC_START:]) != crc:
        raise CorruptBatchError("batch fails its CRC")
    if attributes != CODEC_NONE or codec == CODEC_NONE or magic == MAGIC_KAFKA:
        return raw if isinstance(raw, (bytes, memoryview)) else bytes(raw)
    size = LENGTH_SIZE + MIN_LENGTH[magic]  # the header: kept, producer fields included
    payload = compress(codec, bytes(view[size:]))
    buf = bytearray(view[:size])
    buf += payload
    _header_pack_into(buf, 0, size - LENGTH_SIZE + len(payload), magic, 0, codec, count, base)
    struct.pack_into(">I", buf, 5, _crc32(memoryview(buf)[CRC_START:]))
    return bytes(buf)


class TxnInfo(NamedTuple):
    """A transactional batch (a Kafka producer's, attribute TRANSACTIONAL) where it lies
    in a message set: data of an open transaction, or the marker that ends it."""

    position: int
    """Byte position of the batch in the buffer that was scanned."""
    producer_id: int
    """The transactional producer's id."""
    epoch: int
    """Its epoch."""
    control: int
    """:data:`TXN_DATA` for data; :data:`kafka_batch.CONTROL_COMMIT` or
    :data:`kafka_batch.CONTROL_ABORT` for a marker."""


TXN_DATA = -1
""":attr:`TxnInfo.control` of a transactional data batch."""
_KAFKA_ATTRIBUTES = struct.Struct(">h")
_KAFKA_ATTRIBUTES_AT = KAFKA_AT + 21


def _txn_info(view: memoryview, pos: int, at: int, pid: int, epoch: int) -> TxnInfo | None:
    """The TxnInfo of the magic 3 batch at ``pos`` (reported at position ``at``), or
    None if it is not transactional. Per batch: one unpack (and, for a marker, the
    one control record's key)."""
    attributes = _KAFKA_ATTRIBUTES.unpack_from(view, pos + _KAFKA_ATTRIBUTES_AT)[0]
    if not attributes & kafka_batch.TRANSACTIONAL:
        return None
    control = kafka_batch.control_type(view, pos + KAFKA_AT) if attributes & kafka_batch.CONTROL else TXN_DATA
    return TxnInfo(at, pid, epoch, control)


@dataclass(frozen=True, slots=True)
class ScanResult:
    """What a walk over a buffer of batches found."""

    valid_bytes: int
    """Length of the prefix made of whole batches that passed their CRC."""
    batches: int
    """Number of valid batches in that prefix."""
    messages: int
    """Number of messages in those batches (sum of their count fields)."""
    error: str | None
    """Why the walk stopped before the end of the buffer, or None if it reached it."""
    producers: list[ProducerInfo] | None = None
    """The producer fields of the valid magic 2 batches, in order; None when there is none.
    Transaction markers are not among them (they carry no sequence)."""
    txns: list[TxnInfo] | None = None
    """The transactional batches (data and markers), in order; None when there is none."""


def scan(buf: bytes | bytearray | memoryview | mmap.mmap, start: int = 0, end: int | None = None) -> ScanResult:
    """Walk the batches in ``buf[start:end]`` checking headers and CRCs.

    Stops at the first batch that is torn (runs past ``end``), malformed or corrupt,
    and reports how far the valid prefix goes. Used by the broker to validate produced
    message sets and by recovery to find where a log's valid tail ends.
    """
    view = memoryview(buf)
    if end is None:
        end = len(view)
    pos = start
    batches = messages = 0
    error = None
    producers: list[ProducerInfo] | None = None
    txns: list[TxnInfo] | None = None
    while pos < end:
        if end - pos < HEADER_SIZE:
            error = f"torn batch header at byte {pos} ({end - pos} bytes left)"
            break
        length, magic, crc, attributes, count, _ = _header_unpack_from(view, pos)
        stop = pos + LENGTH_SIZE + length
        # The common batch (magic 1, whole and sound) in one test; any doubt takes the
        # checks below, which say what is wrong. Per batch (a producer of one-message
        # batches sends thousands per request): few steps.
        if (
            magic == MAGIC
            and 18 <= length <= MAX_BATCH_BYTES
            and count
            and stop <= end
            and attributes in CODEC_NAMES
            and _crc32(view[pos + CRC_START : stop]) == crc
        ):
            pos = stop
            batches += 1
            messages += count
            continue
        if magic == MAGIC:
            least = 18
        elif magic == MAGIC_V2:
            least = HEADER_SIZE_V2 - LENGTH_SIZE
        elif magic == MAGIC_KAFKA:
            least = MIN_LENGTH[MAGIC_KAFKA]
        else:
            error = f"bad magic byte {magic} at byte {pos}"
            break
        if length < least or length > MAX_BATCH_BYTES or attributes & ~_CODEC_MASK or count == 0:
            error = f"malformed batch header at byte {pos}"
            break
        if attributes not in CODEC_NAMES:
            error = (
                f"malformed batch header at byte {pos}: unknown compression codec "
                f"{attributes} (known: {', '.join(f'{n} {c}' for n, c in CODECS.items())})"
            )
            break
        stop = pos + LENGTH_SIZE + length
        if stop > end:
            error = f"torn batch at byte {pos}: needs {stop - pos} bytes, {end - pos} left"
            break
        if _crc32(view[pos + CRC_START : stop]) != crc:
            error = f"CRC mismatch in batch at byte {pos}"
            break
        if magic == MAGIC_KAFKA:
            problem = _kafka_problem(view, pos, length, count)
            if problem is not None:
                error = f"malformed Kafka batch at byte {pos}: {problem}"
                break
            pid, epoch, seq = _producer_unpack_from(view, pos + _KAFKA_PRODUCER_AT)
            if pid != NO_PRODUCER:
                try:
                    txn = _txn_info(view, pos, pos - start, pid, epoch)
                except CorruptBatchError as exc:
                    error = f"malformed Kafka batch at byte {pos}: {exc}"
                    break
                if txn is not None:
                    if txns is None:
                        txns = []
                    txns.append(txn)
                if txn is None or txn.control == TXN_DATA:
                    if producers is None:
                        producers = []
                    producers.append(ProducerInfo(pos - start, pid, epoch, seq, count, stop - pos))
        elif magic == MAGIC_V2:
            if producers is None:
                producers = []
            pid, epoch, seq = _producer_unpack_from(view, pos + HEADER_SIZE)
            producers.append(ProducerInfo(pos - start, pid, epoch, seq, count, stop - pos))
        pos = stop
        batches += 1
        messages += count
    return ScanResult(pos - start, batches, messages, error, producers, txns)


def _kafka_problem(view: memoryview, pos: int, length: int, count: int) -> str | None:
    """What is wrong with the Kafka header of the magic 3 batch at ``pos`` (its length
    and CRC checked already), or None: per batch, one unpack."""
    (_, klength, _, kmagic, _, kattributes, _, _, _, _, _, _, kcount) = _kafka_unpack_from(view, pos + KAFKA_AT)
    if kmagic != kafka_batch.KAFKA_MAGIC:
        return f"record batch magic {kmagic}, not 2"
    if kafka_batch.LOG_OVERHEAD + klength != length - (KAFKA_AT - LENGTH_SIZE):
        return f"record batch length {klength} does not fill the stored batch"
    if kcount != count:
        return f"record count {kcount} is not the header's {count}"
    if kattributes & kafka_batch.CONTROL and not kattributes & kafka_batch.TRANSACTIONAL:
        return "a control batch that is not a transaction marker"
    return None


def validate_message_set(buf: bytes | bytearray | memoryview) -> ScanResult:
    """Check that ``buf`` is a whole number of valid batches, or raise.

    The broker calls this on every produced message set before appending it.
    """
    result = scan(buf)
    if result.error is not None:
        raise CorruptBatchError(f"rejected message set: {result.error}")
    if result.batches == 0:
        raise CorruptBatchError("rejected message set: it holds no batch")
    return result


def batch_length_at(buf: bytes | bytearray | memoryview, pos: int = 0) -> int:
    """Total size of the batch starting at ``pos`` (header included), from its header."""
    length: int = struct.unpack_from(">I", buf, pos)[0]
    return LENGTH_SIZE + length


@dataclass(slots=True)
class Batch:
    """One decoded batch: its position in the partition and its messages as columns."""

    offset: int
    """Logical byte offset of the batch in its partition."""
    next_offset: int
    """Offset of the batch after this one (where to fetch next)."""
    keys: list[bytes | None] | None
    """One key per message, or None when no message has a key."""
    values: list[bytes]
    """Message values in order."""
    base_timestamp: int
    """Milliseconds since the epoch of the first message."""
    deltas: list[int] | None
    """Per-message offsets from base_timestamp in ms, or None when all are zero."""
    codec: int
    """Compression codec the producer used."""
    raw: memoryview | None = None
    """The batch's bytes exactly as stored (for copying batches without re-encoding)."""
    producer_id: int = NO_PRODUCER
    """The idempotent producer's id (magic 2), else :data:`NO_PRODUCER`."""
    producer_epoch: int = -1
    """Its epoch (magic 2), else -1."""
    base_sequence: int = -1
    """Sequence number of the first message (magic 2), else -1."""
    headers: list[list[list[bytes | None]] | None] | None = None
    """Per message its record headers (``[[key, value], ...]`` or None), or None when
    no message has any: batches a Kafka producer wrote carry them, and those
    ``logferry produce --header`` writes (:func:`encode_batch`'s ``headers``)."""

    def __len__(self) -> int:
        return len(self.values)

    @property
    def timestamps(self) -> list[int]:
        """One millisecond timestamp per message."""
        base = self.base_timestamp
        if self.deltas is None:
            return [base] * len(self.values)
        return [base + d for d in self.deltas]


def decode_batches(buf: bytes | bytearray | memoryview, offset: int, keep_raw: bool = False) -> tuple[list[Batch], int]:
    """Decode every whole batch in ``buf``, the log bytes starting at ``offset``.

    Returns the batches and the number of bytes they cover; a partial batch at the end
    (a fetch cut by its size limit) is left for the next fetch. Raises
    :class:`CorruptBatchError` for a batch that fails its CRC, naming its offset, so a
    consumer never hands out corrupt data.
    """
    view = memoryview(buf)
    end = len(view)
    pos = 0
    batches: list[Batch] = []
    while end - pos >= HEADER_SIZE:
        length, magic, crc, attributes, count, base = _header_unpack_from(view, pos)
        stop = pos + LENGTH_SIZE + length
        least = MIN_LENGTH.get(magic)
        if least is None or length < least or length > MAX_BATCH_BYTES:
            raise CorruptBatchError(f"malformed batch header at offset {offset + pos}")
        if stop > end:
            break
        if _crc32(view[pos + CRC_START : stop]) != crc:
            raise CorruptBatchError(f"batch at offset {offset + pos} fails its CRC")
        if magic == MAGIC_KAFKA:
            batches.append(_decode_kafka(view[pos:stop], offset + pos, count, keep_raw))
            pos = stop
            continue
        payload: bytes | memoryview = view[pos + LENGTH_SIZE + least : stop]
        producer = (NO_PRODUCER, -1, -1) if magic == MAGIC else _producer_unpack_from(view, pos + HEADER_SIZE)
        codec = attributes & _CODEC_MASK
        if attributes != codec:
            raise CorruptBatchError(
                f"malformed batch header at offset {offset + pos}: attribute bits {attributes:#04x} are not a codec"
            )
        if codec != CODEC_NONE:
            payload = decompress(codec, payload, offset + pos)  # CorruptBatchError if not
        try:
            columns = msgpack.unpackb(payload, raw=False, use_list=True)
            # a 4th column, headers, comes from Kafka producers (docs/kafka.md)
            keys, values, deltas, *more = columns
            headers = more[0] if len(more) == 1 else None
        except Exception as exc:  # msgpack raises several types for bad input
            raise CorruptBatchError(f"batch at offset {offset + pos} has an undecodable payload: {exc}") from None
        _check_columns(keys, values, deltas, count, offset + pos)
        if len(more) > 1 or (headers is not None and (type(headers) is not list or len(headers) != count)):
            raise CorruptBatchError(f"batch at offset {offset + pos} has a 'headers' column that is not {count} items")
        batches.append(
            Batch(
                offset + pos,
                offset + stop,
                keys,
                values,
                base,
                deltas,
                codec,
                view[pos:stop] if keep_raw else None,
                producer[0],
                producer[1],
                producer[2],
                headers,
            )
        )
        pos = stop
    return batches, pos


def _decode_kafka(view: memoryview, offset: int, count: int, keep_raw: bool) -> Batch:
    """The stored magic 3 batch ``view`` at ``offset`` as a :class:`Batch`: a Kafka
    null value becomes b"" (logferry values are bytes), record headers become
    :attr:`Batch.headers`. Per message work, on the client only."""
    problem = _kafka_problem(view, 0, len(view) - LENGTH_SIZE, count)
    if problem is not None:
        raise CorruptBatchError(f"batch at offset {offset} is a malformed Kafka batch: {problem}")
    (_, _, _, _, _, attributes, _, base_ts, _, pid, epoch, seq, _) = _kafka_unpack_from(view, KAFKA_AT)
    if attributes & kafka_batch.CONTROL:
        # a transaction marker: no message for the application (it takes one message
        # offset on the Kafka listener, as in Kafka's log)
        return Batch(offset, offset + len(view), None, [], base_ts, None, 0, view if keep_raw else None, pid, epoch, -1)
    try:
        columns = kafka_batch.records_of(view[KAFKA_AT:], offset)
    except CorruptBatchError as exc:
        raise CorruptBatchError(f"batch at offset {offset}: {exc}") from None
    if len(columns.values) != count:
        raise CorruptBatchError(f"batch at offset {offset} claims {count} messages, holds {len(columns.values)}")
    keys: list[bytes | None] | None = columns.keys
    if keys is not None and keys.count(None) == count:
        keys = None
    values = [b"" if v is None else v for v in columns.values]
    stamps = columns.timestamps
    base = stamps[0]
    deltas = None if stamps.count(base) == count else [t - base for t in stamps]
    headers: list[list[list[bytes | None]] | None] | None = None
    if any(columns.headers):
        headers = [[[k, v] for k, v in hs] if hs else None for hs in columns.headers]
    return Batch(
        offset,
        offset + len(view),
        keys,
        values,
        base,
        deltas,
        attributes & kafka_batch.COMPRESSION_MASK,
        view if keep_raw else None,
        pid,
        epoch if pid != NO_PRODUCER else -1,
        seq if pid != NO_PRODUCER else -1,
        headers,
    )


def _check_columns(keys: object, values: object, deltas: object, count: int, at: int) -> None:
    """A batch's columns are lists of ``count`` items (keys and deltas may be nil).

    Per batch, not per message: a CRC-valid batch from a buggy producer fails here
    with CorruptBatchError instead of a TypeError in the consumer.
    """
    if type(values) is not list or len(values) != count:
        held = len(values) if type(values) is list else type(values).__name__
        raise CorruptBatchError(f"batch at offset {at} claims {count} messages, holds {held}")
    if keys is not None and (type(keys) is not list or len(keys) != count):
        raise CorruptBatchError(f"batch at offset {at} has a 'keys' column that is not {count} items")
    if deltas is not None and (type(deltas) is not list or len(deltas) != count):
        raise CorruptBatchError(f"batch at offset {at} has a 'deltas' column that is not {count} items")


def count_messages(buf: bytes | bytearray | memoryview) -> tuple[int, int]:
    """``(batches, messages)`` of a buffer of whole batches, from their headers only.

    No CRC check: for bytes that were checked already (a fetch) and will be checked
    again (the broker validates every produced batch).
    """
    view = memoryview(buf)
    end = len(view)
    pos = batches = messages = 0
    while pos < end:
        if end - pos < HEADER_SIZE:
            raise CorruptBatchError(f"torn batch header at byte {pos}")
        length, magic, _, _, count, _ = _header_unpack_from(view, pos)
        least = MIN_LENGTH.get(magic)
        if least is None or length < least:
            raise CorruptBatchError(f"malformed batch header at byte {pos}")
        pos += LENGTH_SIZE + length
        batches += 1
        messages += count
    if pos != end:
        raise CorruptBatchError("message set ends inside a batch")
    return batches, messages


def message_time_deltas(raw: bytes | bytearray | memoryview) -> tuple[int, list[int] | None]:
    """``(base timestamp, deltas)`` of the one whole stored batch ``raw``: each message's
    millisecond timestamp is base + its delta; ``deltas`` is None when every message has
    the base.

    For a stage that counts messages by their own time (the mirror's audit): the keys
    and values columns are skipped, not built (msgpack's ``skip``, in C); a compressed
    batch is decompressed. No CRC check (bytes a fetch checked already).
    :class:`CorruptBatchError` if the batch cannot be read.
    """
    view = memoryview(raw)
    length, magic, _, attributes, count, base = _header_unpack_from(view, 0)
    least = MIN_LENGTH.get(magic)
    if least is None or length < least or len(view) < LENGTH_SIZE + length:
        raise CorruptBatchError("malformed or torn batch header")
    if magic == MAGIC_KAFKA:
        batch = _decode_kafka(view[: LENGTH_SIZE + length], 0, count, False)
        return batch.base_timestamp, batch.deltas
    payload: bytes | memoryview = view[LENGTH_SIZE + least : LENGTH_SIZE + length]
    codec = attributes & _CODEC_MASK
    if codec != CODEC_NONE:
        payload = decompress(codec, payload, 0)
    unpacker = msgpack.Unpacker(raw=False)
    unpacker.feed(payload)
    try:
        unpacker.read_array_header()
        unpacker.skip()  # keys
        unpacker.skip()  # values
        deltas = unpacker.unpack()
    except Exception as exc:  # msgpack raises several types for bad input
        raise CorruptBatchError(f"batch payload undecodable: {exc}") from None
    if deltas is not None and (type(deltas) is not list or len(deltas) != count):
        raise CorruptBatchError(f"batch has a 'deltas' column that is not {count} items")
    return base, deltas


def walk_producers(
    buf: bytes | bytearray | memoryview, txns: list[TxnInfo] | None = None
) -> tuple[list[ProducerInfo], int]:
    """The producer fields of the magic 2 batches whose headers lie in ``buf``.

    Hops from header to header without reading payloads or checking CRCs (for bytes
    of the log, already checked: rebuilding producer state on load). Returns them and
    the position of the first header not wholly in ``buf`` (which may lie past its end:
    the next read starts there). CorruptBatchError for a header that cannot be one.
    Transaction markers are not among them; with ``txns``, every transactional batch
    (data and markers) is added to it.
    """
    view = memoryview(buf)
    end = len(view)
    pos = 0
    out: list[ProducerInfo] = []
    while end - pos >= HEADER_SIZE:
        length, magic, _, _, count, _ = _header_unpack_from(view, pos)
        least = MIN_LENGTH.get(magic)
        if least is None or length < least:
            raise CorruptBatchError(f"malformed batch header at byte {pos}")
        if magic == MAGIC_V2:
            if end - pos < HEADER_SIZE_V2:
                break
            pid, epoch, seq = _producer_unpack_from(view, pos + HEADER_SIZE)
            out.append(ProducerInfo(pos, pid, epoch, seq, count, LENGTH_SIZE + length))
        elif magic == MAGIC_KAFKA:
            if end - pos < LENGTH_SIZE + MIN_LENGTH[MAGIC_KAFKA]:
                break
            pid, epoch, seq = _producer_unpack_from(view, pos + _KAFKA_PRODUCER_AT)
            if pid != NO_PRODUCER:
                attributes = _KAFKA_ATTRIBUTES.unpack_from(view, pos + _KAFKA_ATTRIBUTES_AT)[0]
                if attributes & kafka_batch.CONTROL and pos + LENGTH_SIZE + length > end:
                    break  # a marker's record must be read: the next read starts here
                txn = _txn_info(view, pos, pos, pid, epoch)
                if txn is not None and txns is not None:
                    txns.append(txn)
                if txn is None or txn.control == TXN_DATA:
                    out.append(ProducerInfo(pos, pid, epoch, seq, count, LENGTH_SIZE + length))
        pos += LENGTH_SIZE + length
    return out, pos


def iter_raw_batches(buf: bytes | bytearray | memoryview) -> Iterator[tuple[int, memoryview]]:
    """Yield ``(position, bytes)`` of each whole batch in ``buf`` without decoding it."""
    view = memoryview(buf)
    end = len(view)
    pos = 0
    while end - pos >= LENGTH_SIZE:
        stop = pos + LENGTH_SIZE + struct.unpack_from(">I", view, pos)[0]
        if stop > end:
            return
        yield pos, view[pos:stop]
        pos = stop


__all__ = [
    "TXN_DATA",
    "TxnInfo",
    "BATCH_HEADER",
    "BATCH_HEADER_V2",
    "Batch",
    "CODECS",
    "CODEC_GZIP",
    "CODEC_LZ4",
    "CODEC_NONE",
    "CODEC_ZSTD",
    "CRC_START",
    "HEADER_SIZE",
    "HEADER_SIZE_V2",
    "LENGTH_SIZE",
    "KAFKA_AT",
    "MAGIC",
    "MAGIC_KAFKA",
    "MAGIC_V2",
    "MAX_BATCH_BYTES",
    "MIN_LENGTH",
    "NO_PRODUCER",
    "PRODUCER_FIELDS",
    "SEQUENCE_MODULUS",
    "ProducerInfo",
    "ScanResult",
    "batch_length_at",
    "compress_batch",
    "count_messages",
    "decode_batches",
    "encode_batch",
    "encode_batch_deltas",
    "iter_raw_batches",
    "scan",
    "validate_message_set",
    "walk_producers",
]
