"""One segment file of a partition log: ``<dir>/<20-digit base offset>.log``.

A segment holds whole batches, back to back, exactly as producers sent them. Its file
name is the logical offset of its first byte, zero-padded to 20 digits so that ``ls``
lists segments in log order. Byte ``pos`` of the file is logical offset
``base_offset + pos`` of the partition.

Two handles per file, for two different users:

* an append descriptor (``os.open`` with ``O_APPEND``), open only while the segment can
  still be written or fsynced; it is closed ("sealed") once the segment is rolled and
  flushed, so old segments cost one descriptor, not two;
* a read file object (unbuffered ``'rb'``), used for ``os.pread`` and handed to
  ``loop.sendfile`` by the server. It is never closed on :meth:`Segment.delete`: a
  fetch in flight may still be sending from it, and it closes itself when the last
  reference goes away (:class:`SegmentFile`). Reads never use the file object's
  position (pread and the native sendfile both take explicit offsets).
"""

from __future__ import annotations

import contextlib
import io
import os
import time
from pathlib import Path
from typing import BinaryIO

from broker.storage.offset_index import SUFFIX as INDEX_SUFFIX
from broker.storage.offset_index import OffsetIndex
from broker.wire.records import BATCH_HEADER, HEADER_SIZE

SUFFIX = ".log"


class SegmentFile(io.FileIO):
    """A segment's read file: shared by the segment and the fetches sending from it,
    closed by whichever lets go last. A plain file would close then too, but with a
    ResourceWarning for what is here the intended ownership."""

    def __del__(self) -> None:
        self.close()


_DIGITS = 20

WRITE_PIECE_BYTES = 256 * 1024
"""Most bytes one ``os.write`` of an append carries; a larger append is written in
pieces of this size (views of the same buffer, no copy).

Linux 6.x caches a file written with large writes in large folios, as large as the
write up to 2 MiB. On a VM whose balloon reports free memory to the host (this one
does, as many cloud VMs do), large free blocks are what gets reported, and filling a
folio made of one faults on the host page by page. Writes of small pieces take small
folios from memory the guest used a moment ago, and stay cheap longer.
``benchmarks/page_cache_writes.py --sizes-kib 256,1024,2048 --runs 12`` (84 MiB per
file, files kept as a log keeps its segments), medians of two runs: 0.18 and 0.20 ns a
byte for 256 KiB writes, 1.38 and 1.74 for 1 MiB, 1.98 and 2.08 for 2 MiB (a slow
write costs 2.3-3.6). Every size turns dear once the page cache has grown into a few
GB of fresh memory; small pieces put that off. A producer that falls behind sends
requests of up to 16 MiB (``max_request_bytes``), and with one ``os.write`` per request
the broker's CPU per 200 B message in ``benchmarks/broker_throughput.py``'s batch-50
case was 650 ns (TLS 750), nearly all of it in the kernel's copy into the page cache;
in pieces, 175 (TLS 300), medians of 5 alternated rounds of ``benchmarks/ab_compare.py``.
The pieces' syscalls are inside page_cache_writes' per-byte figure: while both were
cheap, 256 KiB and 2 MiB writes cost 0.20 and 0.23 ns a byte."""

_unpack_header = BATCH_HEADER.unpack_from


def segment_file_name(base_offset: int) -> str:
    """File name of the segment whose first byte is at ``base_offset``."""
    return f"{base_offset:0{_DIGITS}d}{SUFFIX}"


def parse_segment_file_name(name: str) -> int | None:
    """Base offset encoded in a segment file name, or None if ``name`` is not one."""
    if len(name) != _DIGITS + len(SUFFIX) or not name.endswith(SUFFIX):
        return None
    digits = name[:_DIGITS]
    return int(digits) if digits.isdigit() and digits.isascii() else None


def now_ms() -> int:
    """Wall-clock milliseconds, the clock the server passes as ``now_ms``."""
    return time.time_ns() // 1_000_000


def fsync_dir(directory: Path) -> None:
    """fsync a directory so that files created in or removed from it stay so.

    A directory that no longer exists is skipped: its partition was deleted meanwhile.
    """
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Segment:
    """One open segment file; see the module docstring for its two handles."""

    __slots__ = ("base_offset", "path", "size", "created_ms", "reader", "damaged", "index", "_fd", "_first_ts")

    def __init__(self, path: Path, base_offset: int, reader: BinaryIO, size: int, created_ms: int, fd: int = -1):
        self.base_offset = base_offset
        """Logical offset of the file's first byte."""
        self.path = path
        self.size = size
        """Bytes in the file that belong to the log (the file's length)."""
        self.created_ms = created_ms
        """When the segment was created; for a segment found on disk, its mtime."""
        self.reader = reader
        """Unbuffered read file object, for pread and sendfile."""
        self.damaged = False
        """True once a failed append could not be undone: the file has a bad tail."""
        self.index = OffsetIndex(base_offset, 0)
        """Its message offsets (:mod:`broker.storage.offset_index`); the partition log
        loads or sets it (first message 0 until then)."""
        self._fd = fd
        self._first_ts: int | None = None

    @classmethod
    def create(cls, directory: Path, base_offset: int) -> Segment:
        """Create a new, empty segment file; fails if the file already exists."""
        path = directory / segment_file_name(base_offset)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            reader = SegmentFile(path, "rb")
        except BaseException:
            os.close(fd)
            raise
        return cls(path, base_offset, reader, 0, now_ms(), fd)

    @classmethod
    def open(cls, path: Path, base_offset: int) -> Segment:
        """Open an existing segment file for reading; see :meth:`open_for_append`."""
        reader = SegmentFile(path, "rb")
        try:
            st = os.fstat(reader.fileno())
        except BaseException:
            reader.close()
            raise
        return cls(path, base_offset, reader, st.st_size, st.st_mtime_ns // 1_000_000)

    @property
    def end_offset(self) -> int:
        """Logical offset just after the segment's last byte."""
        return self.base_offset + self.size

    @property
    def writable(self) -> bool:
        """True while the append descriptor is open."""
        return self._fd >= 0

    @property
    def last_modified_ms(self) -> int:
        """The file's modification time in ms (what time-based retention looks at)."""
        return os.stat(self.path).st_mtime_ns // 1_000_000

    def open_for_append(self) -> None:
        """Open the append descriptor (for the active segment of a loaded log)."""
        if self._fd < 0:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def append(self, data: bytes | bytearray | memoryview) -> None:
        """Write ``data`` at the end of the file, all of it or none of it.

        ``os.write`` may write less than asked (a disk filling up, a file size limit);
        the loop writes the rest. If a write fails after some bytes went out, the file
        is cut back to its previous size before the OSError propagates, so the log
        never keeps half a batch. If even that cut fails, :attr:`damaged` is set and
        the caller must stop writing to this segment.

        Writes at most :data:`WRITE_PIECE_BYTES` per call.
        """
        view = memoryview(data).cast("B")
        total = view.nbytes
        written = 0
        try:
            while written < total:
                written += os.write(self._fd, view[written : written + WRITE_PIECE_BYTES])
        except OSError as exc:
            if written:
                try:
                    os.ftruncate(self._fd, self.size)
                except OSError as cut:
                    self.damaged = True
                    exc.add_note(f"cutting {self.path} back to {self.size} bytes also failed: {cut}")
            raise
        finally:
            view.release()
        self.size += total

    def dup_fd(self) -> int:
        """A duplicate of the append descriptor, for an fsync in another thread.

        The duplicate stays valid even if this segment is sealed or deleted before the
        fsync runs, so a worker thread never fsyncs a descriptor number that was closed
        and reused meanwhile.
        """
        return os.dup(self._fd)

    def fsync(self) -> None:
        """Force the file's data to disk (blocking)."""
        os.fsync(self._fd if self._fd >= 0 else self.reader.fileno())

    def truncate(self, size: int) -> None:
        """Cut the file to ``size`` bytes (recovery, or undoing a failed append)."""
        if self._fd >= 0:
            os.ftruncate(self._fd, size)
        else:
            os.truncate(self.path, size)
        self.size = size
        if size < HEADER_SIZE:
            self._first_ts = None

    def read(self, pos: int, n: int) -> bytes:
        """Up to ``n`` bytes at file position ``pos`` (one pread, no shared position)."""
        return os.pread(self.reader.fileno(), n, pos)

    def first_timestamp(self) -> int | None:
        """Base timestamp of the segment's first batch, or None if it has none yet.

        Cached: the bytes of a batch never change once written.
        """
        if self._first_ts is None and self.size >= HEADER_SIZE:
            header = self.read(0, HEADER_SIZE)
            if len(header) == HEADER_SIZE:
                self._first_ts = _unpack_header(header)[5]
        return self._first_ts

    def seal(self) -> None:
        """Close the append descriptor; the segment stays readable."""
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)

    def close(self) -> None:
        """Close both handles (log shutdown: no fetch can be in flight any more)."""
        self.seal()
        self.reader.close()

    def delete(self) -> None:
        """Remove the file and its index. The read file object stays open for fetches in
        flight."""
        self.seal()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path.with_suffix(INDEX_SUFFIX))

    def __repr__(self) -> str:
        return f"Segment({self.path.name}, size={self.size})"
