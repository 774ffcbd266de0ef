"""Per-message offsets beside the byte offsets: the sans-IO core (format and arithmetic).

Native clients address a partition by the paper's byte offsets; Kafka clients expect one
offset per message. Both address the same log: each message gets a per-partition
sequential *message offset*, assigned per batch at append (a batch's record count is in
its header, so nothing looks inside a batch): the first message offset of a batch is the
previous batch's first plus its count.

Every segment ``<base byte offset>.log`` has an :class:`OffsetIndex`, persisted beside it
as ``<base byte offset>.index``: the segment's first message offset, how many messages
its bytes hold, and a sparse list of (message offset, byte position) pairs, each the
start of a batch, at least :data:`INDEX_INTERVAL_BYTES` apart (Kafka's ``.index`` keeps
one entry every ``index.interval.bytes``, 4096, of 8 bytes; here an entry is 16 bytes
every 8 KiB: the same 2 bytes of index per KiB of log, and a lookup walks at most 8 KiB
of batch headers past the entry it finds, plus the rest of one appended message set).
An entry is taken at an append (the start of the appended set, whose first message
offset the log knows) or, rebuilding, at a batch start.

The index is derived from the bytes, so every replica holding the same bytes from the
same first message offset derives the same message offsets. What the bytes cannot say is
how many messages came before the oldest retained segment: that is the header's
``base_message``, written when the segment is created (its predecessor's base plus its
count) and made durable before retention deletes the segments before it.

File layout (little-endian), :data:`HEADER` then ``entries`` message offsets then
``entries`` positions, both ``u64`` relative to the segment's bases::

    magic          4s  b"LFIX"
    version        u16 1
    flags          u16 0
    base_byte      u64 the segment's base byte offset (its file name)
    base_message   u64 message offset of the segment's first message
    covered_bytes  u64 segment bytes the entries and ``messages`` describe
    messages       u64 messages in those bytes
    entries        u32
    interval       u32 the spacing the entries were taken with
    header_crc     u32 zlib.crc32 of the fields above
    entries_crc    u32 zlib.crc32 of the entries

An index whose ``covered_bytes`` differs from its segment's size (a crash: the active
segment's index is written at roll and at close, never per append) is rebuilt from the
segment's bytes; its ``base_message`` still counts, since it never changes for a segment.
"""

from __future__ import annotations

import mmap
import struct
import sys
import zlib
from array import array
from bisect import bisect_right

from broker.wire.records import LENGTH_SIZE, MIN_LENGTH

INDEX_INTERVAL_BYTES = 8192
"""Least distance in bytes between two index entries (see the module docstring)."""

SUFFIX = ".index"
MAGIC = b"LFIX"
VERSION = 1
HEADER = struct.Struct("<4sHHQQQQII")
"""magic, version, flags, base_byte, base_message, covered_bytes, messages, entries,
interval; two u32 CRCs follow (:data:`_CRCS`)."""
_CRCS = struct.Struct("<II")
"""After the header: zlib.crc32 of the header, then of the entries."""
HEADER_BYTES = HEADER.size + _CRCS.size

_LENGTH_AND_COUNT = struct.Struct(">I6xI")
"""A batch header's length field and record count (bytes 0-3 and 10-13 of every magic)."""
HEAD_BYTES = _LENGTH_AND_COUNT.size
_head = _LENGTH_AND_COUNT.unpack_from
_LEAST_LENGTH = min(MIN_LENGTH.values())
_SWAP = sys.byteorder != "little"


class IndexFormatError(ValueError):
    """An index file that cannot be used: rebuild it from its segment."""


class OffsetIndex:
    """The message offsets of one segment: its first, its count, sparse entries.

    ``size`` is the number of segment bytes described (the segment's size while the
    index is kept up to date); ``saved_size`` what the file on disk describes (-1: no
    valid file), so writers know when it is stale.
    """

    __slots__ = ("base_byte", "base_message", "messages", "size", "saved_size", "interval", "_msgs", "_poss", "_next")

    def __init__(self, base_byte: int, base_message: int, interval: int = INDEX_INTERVAL_BYTES):
        self.base_byte = base_byte
        self.base_message = base_message
        self.messages = 0
        """Messages in the first ``size`` bytes of the segment."""
        self.size = 0
        self.saved_size = -1
        self.interval = interval
        self._msgs = array("Q")  # relative message offsets of the entries
        self._poss = array("Q")  # relative byte positions of the entries
        self._next = 0  # an append at or past this position gets an entry

    # -- building ---------------------------------------------------------------------------

    def note_append(self, nbytes: int, count: int) -> None:
        """Hot path: a message set of ``nbytes`` bytes and ``count`` messages was
        appended at position ``size``. One comparison, and an entry every interval."""
        pos = self.size
        if pos >= self._next:
            self._msgs.append(self.messages)
            self._poss.append(pos)
            self._next = pos + self.interval
        self.messages += count
        self.size = pos + nbytes

    @property
    def end_message(self) -> int:
        """Message offset just after the described bytes."""
        return self.base_message + self.messages

    @property
    def entries(self) -> list[tuple[int, int]]:
        """The (absolute message offset, absolute byte offset) pairs, in order."""
        bm, bb = self.base_message, self.base_byte
        return [(bm + m, bb + p) for m, p in zip(self._msgs, self._poss, strict=True)]

    def truncate(self, size: int) -> tuple[int, int]:
        """Forget everything at or after position ``size``: the index then describes the
        bytes up to its last remaining entry, and :func:`index_batches` recounts the rest.
        Returns that entry's (relative position, relative message)."""
        keep = bisect_right(self._poss, size - 1) if size else 0
        del self._msgs[keep:]
        del self._poss[keep:]
        if keep:
            pos, msg = self._poss[-1], self._msgs[-1]
            self._next = pos + self.interval
        else:
            pos = msg = self._next = 0
        self.size = pos
        self.messages = msg
        return pos, msg

    # -- lookups ----------------------------------------------------------------------------

    def floor_by_position(self, pos: int) -> tuple[int, int]:
        """(relative position, relative message) of the last entry at or before ``pos``
        (the segment's start if none): where a walk to ``pos`` begins."""
        i = bisect_right(self._poss, pos) - 1
        if i < 0:
            return 0, 0
        return self._poss[i], self._msgs[i]

    def floor_by_message(self, rel_message: int) -> tuple[int, int]:
        """(relative position, relative message) of the last entry whose batch starts at
        or before message ``rel_message``: where a walk to that message begins."""
        i = bisect_right(self._msgs, rel_message) - 1
        if i < 0:
            return 0, 0
        return self._poss[i], self._msgs[i]

    # -- the file ---------------------------------------------------------------------------

    def encode(self) -> bytes:
        """The index file's bytes."""
        msgs, poss = self._msgs, self._poss
        if _SWAP:  # pragma: no cover - big-endian machines
            msgs, poss = array("Q", msgs), array("Q", poss)
            msgs.byteswap()
            poss.byteswap()
        head = HEADER.pack(
            MAGIC, VERSION, 0, self.base_byte, self.base_message, self.size, self.messages, len(msgs), self.interval
        )
        body = msgs.tobytes() + poss.tobytes()
        return head + _CRCS.pack(zlib.crc32(head), zlib.crc32(body)) + body

    @classmethod
    def decode(cls, data: bytes | memoryview, base_byte: int) -> OffsetIndex:
        """Parse a whole index file for the segment at ``base_byte``; IndexFormatError if
        it is not one, is damaged or belongs to another segment."""
        index, n = decode_header(data, base_byte)
        body = memoryview(data)[HEADER_BYTES:]
        if len(body) != 16 * n:
            raise IndexFormatError(f"{n} entries need {16 * n} bytes after the header, the file has {len(body)}")
        if zlib.crc32(body) != _CRCS.unpack_from(data, HEADER.size)[1]:
            raise IndexFormatError("CRC mismatch in the entries")
        msgs, poss = array("Q"), array("Q")
        msgs.frombytes(body[: 8 * n])
        poss.frombytes(body[8 * n :])
        if _SWAP:  # pragma: no cover - big-endian machines
            msgs.byteswap()
            poss.byteswap()
        prev_m = prev_p = -1
        for m, p in zip(msgs, poss, strict=True):
            if m < prev_m or p <= prev_p or p >= index.size or m > index.messages:
                raise IndexFormatError(f"entry ({m}, {p}) out of order or past the covered bytes")
            prev_m, prev_p = m, p
        index._msgs, index._poss = msgs, poss
        index._next = poss[-1] + index.interval if n else 0
        index.saved_size = index.size
        return index


def decode_header(data: bytes | memoryview, base_byte: int) -> tuple[OffsetIndex, int]:
    """The header of an index file (its own CRC checked), as an index without entries,
    and how many entries the file says follow. Its ``base_message`` can be trusted even
    when the entries are damaged or stale. IndexFormatError if the header is not sound."""
    if len(data) < HEADER_BYTES:
        raise IndexFormatError(f"{len(data)} bytes, shorter than the {HEADER_BYTES}-byte header")
    head = memoryview(data)[: HEADER.size]
    if zlib.crc32(head) != _CRCS.unpack_from(data, HEADER.size)[0]:
        raise IndexFormatError("CRC mismatch in the header")
    magic, version, _flags, base, base_message, covered, messages, entries, interval = HEADER.unpack_from(head)
    if magic != MAGIC or version != VERSION:
        raise IndexFormatError(f"not an index file of version {VERSION} (magic {magic!r}, version {version})")
    if base != base_byte:
        raise IndexFormatError(f"it belongs to the segment at byte {base}, not {base_byte}")
    if interval <= 0:
        raise IndexFormatError(f"interval {interval}")
    index = OffsetIndex(base, base_message, interval)
    index.size = covered
    index.messages = messages
    return index, entries


# -- walking batch headers --------------------------------------------------------------------


class BatchWalkError(ValueError):
    """A batch header that cannot be one (a length field below any batch's)."""


def walk(
    buf: bytes | bytearray | memoryview | mmap.mmap,
    at: int,
    pos: int,
    message: int,
    until_pos: int,
    until_message: int,
) -> tuple[int, int, bool]:
    """Walk batch headers from the batch at ``pos`` (message ``message``).

    ``buf`` holds segment bytes from position ``at``. Stops before the first batch that
    starts at or after ``until_pos``, or that holds message ``until_message``. Returns
    ``(pos, message, done)``: the batch where it stopped and its first message, and
    whether it stopped for one of those reasons (False: the next header is not wholly
    in ``buf``; call again with more bytes from ``pos``). Per batch: one unpack.
    """
    end = at + len(buf)
    while pos < until_pos:
        i = pos - at
        if pos + HEAD_BYTES > end:
            return pos, message, False
        length, count = _head(buf, i)
        if length < _LEAST_LENGTH:
            raise BatchWalkError(f"length field {length} at byte {pos}")
        if message + count > until_message:
            return pos, message, True
        pos += LENGTH_SIZE + length
        message += count
    return pos, message, True


def index_batches(
    buf: bytes | bytearray | memoryview | mmap.mmap,
    index: OffsetIndex,
    end: int,
) -> str | None:
    """Rebuild ``index`` (empty, or :meth:`OffsetIndex.truncate`d) from the segment bytes
    in ``buf`` (from position 0) up to ``end``: an entry every interval, counting every
    batch. Returns None, or why it stopped early (a torn or malformed header: the index
    then describes the bytes before it)."""
    pos, message, nxt = index.size, index.messages, index._next
    interval = index.interval
    msgs, poss = index._msgs, index._poss
    problem = None
    while pos < end:
        if pos + HEAD_BYTES > end:
            problem = f"torn batch header at byte {pos}"
            break
        length, count = _head(buf, pos)
        stop = pos + LENGTH_SIZE + length
        if length < _LEAST_LENGTH or stop > end:
            problem = f"bad or torn batch at byte {pos} (length field {length})"
            break
        if pos >= nxt:
            msgs.append(message)
            poss.append(pos)
            nxt = pos + interval
        pos = stop
        message += count
    index.size, index.messages, index._next = pos, message, nxt
    return problem


def chain_bases(anchors: list[int | None], counts: list[int], first_byte: int) -> tuple[list[int], int | None]:
    """Each segment's first message offset, from the segments' message counts and what
    their index headers say (``anchors``, None where unknown).

    The first segment with a known base anchors the chain: later segments follow from
    it forward (base + count), earlier ones backward. Returns the bases and the index
    of the first segment whose header disagreed with the chain (None: all agree).
    Without any anchor the log's first message offset is taken to be its first byte
    offset ``first_byte`` (0 for a log that still starts at byte 0, which is every log
    retention never cut): a log written before message offsets existed and already cut
    by retention cannot know how many messages went before it.
    """
    n = len(counts)
    k = next((i for i, a in enumerate(anchors) if a is not None), None)
    bases = [0] * n
    if k is None:
        k, start = 0, first_byte
    else:
        start = anchors[k]  # type: ignore[assignment]  # not None: found above
    bases[k] = start
    for i in range(k - 1, -1, -1):
        bases[i] = bases[i + 1] - counts[i]
    if n and bases[0] < 0:  # the headers contradict the bytes: shift so offsets stay >= 0
        shift = -bases[0]
        bases = [b + shift for b in bases]
    for i in range(k + 1, n):
        bases[i] = bases[i - 1] + counts[i - 1]
    disagree = next((i for i, a in enumerate(anchors) if a is not None and a != bases[i]), None)
    return bases, disagree
