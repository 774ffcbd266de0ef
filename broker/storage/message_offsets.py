"""Message offsets on disk: the thin IO layer over :mod:`broker.storage.offset_index`.

Reads and writes the ``<base>.index`` file beside each segment, rebuilds an index from
its segment's bytes, and walks batch headers with ``pread`` for lookups. When files are
written (never on the append path):

* a segment's index file is created with the segment (roll, restart, truncation below
  the log start), written whole when the segment is rolled, and at a clean close;
* before retention deletes the oldest segments, the index of the segment that becomes
  the first is written and fsynced: its header is then the only record of how many
  messages went before;
* a truncation rewrites the cut segment's index and fsyncs it with the cut.

Loading (:func:`load_indexes`) trusts an index file whose CRCs hold and that describes
exactly its segment's bytes; any other segment (no file: a log written before message
offsets; a damaged file; a crash after appends) is walked and its index rebuilt and
saved. An index is never fsynced on its own: a crash can only leave it stale or torn,
and both are rebuilt from the bytes that survived.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
from pathlib import Path

from broker.common.errors import InvalidOffsetError, StorageError
from broker.storage.offset_index import (
    HEAD_BYTES,
    SUFFIX,
    BatchWalkError,
    IndexFormatError,
    OffsetIndex,
    chain_bases,
    decode_header,
    index_batches,
    walk,
)
from broker.storage.segment import Segment, parse_segment_file_name

log = logging.getLogger("logferry.storage")

_WALK_CHUNK = 64 * 1024
"""Bytes per pread of a lookup's walk: the 8 KiB after an index entry and then some."""
_NO_LIMIT = 1 << 63


def index_path(segment_path: Path) -> Path:
    """The index file beside a segment file."""
    return segment_path.with_suffix(SUFFIX)


def save(seg: Segment, fsync: bool = False) -> None:
    """Write ``seg``'s index file whole (a temporary file renamed into place, so a crash
    leaves the old file or the new one). OSError propagates."""
    path = index_path(seg.path)
    tmp = path.with_name(path.name + ".tmp")
    data = seg.index.encode()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    seg.index.saved_size = seg.index.size


def save_quietly(seg: Segment, name: str) -> None:
    """:func:`save`, logging a failure instead of raising: the next start rebuilds it."""
    try:
        save(seg)
    except OSError as exc:
        log.warning("%s: could not write the message offset index of %s: %s", name, seg.path.name, exc)


def remove(segment_path: Path) -> None:
    """Delete the index file of a segment (if any)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(index_path(segment_path))


def rebuild(seg: Segment, index: OffsetIndex) -> str | None:
    """Extend ``index`` over ``seg``'s bytes from ``index.size`` to the segment's end,
    walking batch headers through a read-only mapping. Returns why it stopped short,
    or None."""
    if seg.size <= index.size:
        return None
    with mmap.mmap(seg.reader.fileno(), seg.size, access=mmap.ACCESS_READ) as mapped:
        return index_batches(mapped, index, seg.size)


def load_indexes(directory: Path, segments: list[Segment], name: str) -> None:
    """Give every segment its index: from its file when that is sound and current,
    else rebuilt from the segment (and saved). Chains the segments' first message
    offsets (see :func:`broker.storage.offset_index.chain_bases`). Removes index files
    whose segment is gone."""
    anchors: list[int | None] = []
    counts: list[int] = []
    rebuilt = 0
    for seg in segments:
        index, anchor = _read(seg, name)
        if index is None:
            index = OffsetIndex(seg.base_offset, 0)
            problem = rebuild(seg, index)
            rebuilt += 1
            if problem is not None:
                log.warning(
                    "%s: message offsets of %s cover its first %d of %d bytes: %s",
                    name,
                    seg.path.name,
                    index.size,
                    seg.size,
                    problem,
                )
        seg.index = index
        anchors.append(anchor)
        counts.append(index.messages)
    bases, disagree = chain_bases(anchors, counts, segments[0].base_offset)
    if disagree is not None:
        log.warning(
            "%s: the message offset index of %s says its first message is %s, its "
            "predecessors' counts say %d; going by the counts",
            name,
            segments[disagree].path.name,
            anchors[disagree],
            bases[disagree],
        )
    for seg, base in zip(segments, bases, strict=True):
        if seg.index.base_message != base:
            seg.index.base_message = base
            seg.index.saved_size = -1
        if seg.index.saved_size != seg.index.size:
            save_quietly(seg, name)
    if rebuilt:
        log.info("%s: rebuilt the message offset index of %d segment(s)", name, rebuilt)
    remove_orphans(directory, {s.base_offset for s in segments}, name)


def _read(seg: Segment, name: str) -> tuple[OffsetIndex | None, int | None]:
    """The segment's index if its file is sound and describes the segment's bytes
    exactly, and the first message offset its header gives (if the header is sound)."""
    path = index_path(seg.path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        log.warning("%s: cannot read %s (%s): rebuilding it", name, path, exc)
        return None, None
    try:
        header, _ = decode_header(data, seg.base_offset)
    except IndexFormatError as exc:
        log.warning("%s: %s is damaged (%s): rebuilding it", name, path, exc)
        return None, None
    if header.size != seg.size:
        return None, header.base_message  # stale (a crash after appends): the bytes say more
    try:
        return OffsetIndex.decode(data, seg.base_offset), header.base_message
    except IndexFormatError as exc:
        log.warning("%s: %s is damaged (%s): rebuilding it", name, path, exc)
        return None, header.base_message


def remove_orphans(directory: Path, bases: set[int], name: str) -> None:
    """Delete the index files (and temporary ones) of segments not in ``bases``."""
    with os.scandir(directory) as entries:
        for entry in entries:
            if entry.name.endswith(SUFFIX + ".tmp"):
                stray = True
            elif entry.name.endswith(SUFFIX):
                base = parse_segment_file_name(entry.name[: -len(SUFFIX)] + ".log")
                stray = base is not None and base not in bases
            else:
                continue
            if stray:
                log.info("%s: removing %s: its segment is gone", name, entry.path)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)


# -- lookups ----------------------------------------------------------------------------------


def _walk(seg: Segment, pos: int, message: int, until_pos: int, until_message: int) -> tuple[int, int]:
    """:func:`broker.storage.offset_index.walk` over ``seg``'s bytes read in chunks."""
    try:
        while True:
            # no further than the last header a walk to until_pos may need
            want = min(_WALK_CHUNK, seg.size - pos, until_pos - pos + HEAD_BYTES)
            buf = seg.read(pos, want) if pos < until_pos else b""
            new_pos, new_message, done = walk(buf, pos, pos, message, until_pos, until_message)
            if done:
                return new_pos, new_message
            if new_pos == pos and len(buf) < HEAD_BYTES:
                raise BatchWalkError(f"torn batch header at byte {pos}")
            pos, message = new_pos, new_message
    except (OSError, BatchWalkError) as exc:
        raise StorageError(f"cannot walk the batches of {seg.path} from byte {pos}: {exc}") from exc


def message_at(seg: Segment, pos: int, name: str, hint: tuple[int, int] | None = None) -> int:
    """Message offset of the batch that starts at byte ``pos`` of ``seg`` (or of the
    segment's end); InvalidOffsetError if no batch starts there.

    ``hint``: a batch start known in ``seg`` (its byte position, its message offset
    relative to the segment's first) at or before ``pos``; the walk starts there when it
    is nearer than the index entry before ``pos`` (a high watermark read again a batch
    later walks one batch, not up to an index interval)."""
    index = seg.index
    start_pos, start_message = index.floor_by_position(pos)
    if hint is not None and start_pos < hint[0] <= pos:
        start_pos, start_message = hint
    found, message = _walk(seg, start_pos, start_message, pos, _NO_LIMIT)
    if found != pos:
        raise InvalidOffsetError(f"offset {seg.base_offset + pos} is not the start of a batch in partition {name}")
    return index.base_message + message


def find_message(seg: Segment, message: int) -> tuple[int, int]:
    """(byte position in ``seg`` of the batch holding message ``message`` (relative to
    the segment's first message), how many of its messages come before it)."""
    index = seg.index
    start_pos, start_message = index.floor_by_message(message)
    pos, first = _walk(seg, start_pos, start_message, index.size, message)
    return pos, message - first


def cut(seg: Segment, size: int) -> None:
    """After ``seg`` was truncated to ``size`` bytes: cut its index there and recount."""
    seg.index.truncate(size)
    if seg.size:
        with mmap.mmap(seg.reader.fileno(), seg.size, access=mmap.ACCESS_READ) as mapped:
            index_batches(mapped, seg.index, size)
