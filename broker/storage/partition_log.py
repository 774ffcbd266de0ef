"""One partition's log: segments addressed by logical byte offsets (the paper's design).

Offsets count bytes across the whole partition: a segment is named by the offset of
its first byte, a batch's offset is where its first byte lies, and the next batch
starts at ``offset + len(batch)``. The sorted list of segment base offsets finds an
offset's segment by bisect, and a fetch is a byte range of one segment file handed to
``sendfile``. Message offsets (one per message, for Kafka clients) live beside them in
a sparse index per segment (:mod:`broker.storage.offset_index`), kept by
:meth:`PartitionLog.append` from the batch counts it is given.

Three ends, in order ``start_offset <= visible_end <= end_offset``:

* ``start_offset``: first retained byte; retention moves it forward a segment at a time,
  deleting records up to a message (Kafka's DeleteRecords) to the batch holding it
  (:mod:`broker.storage.log_start`: what lies below it in the first segment is hidden).
* ``visible_end``: the high watermark. Consumers read only below it. By default
  (``visibility = "flushed"``) it is the flushed end, so they never see a byte that a
  crash could take back; with ``visibility = "written"`` it is the log end, so they
  never see a byte that a broker process crash could take back (a power loss can).
  A replicated partition caps it further with :meth:`PartitionLog.set_high_watermark`
  (the end that every in-sync replica has, see :mod:`broker.replication`).
* ``end_offset``: just after the last appended byte.

Flushing is split in three so the fsync can run in a worker thread while the event
loop keeps appending: :meth:`PartitionLog.prepare_flush` (loop thread) captures what to
sync, :meth:`PendingFlush.run` (any thread) syncs it, :meth:`PartitionLog.mark_flushed`
(loop thread) publishes it. Everything else runs on the event loop thread, except
:meth:`PartitionLog.offset_for_time`, which works on a snapshot so that it may run in
a worker thread too.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import uuid
import zlib
from bisect import bisect_right
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, NamedTuple

from broker.common.errors import (
    CorruptBatchError,
    DiskFullError,
    InvalidOffsetError,
    OffsetOutOfRangeError,
    StorageError,
)
from broker.common.names import partition_dir_name
from broker.storage import message_offsets, producer_snapshots
from broker.storage.config import VISIBILITY_WRITTEN, LogConfig
from broker.storage.loader import load_segments
from broker.storage.log_start import LogStart, read_log_start, remove_log_start, write_log_start
from broker.storage.producer_state import Held, ProducerStateTable
from broker.storage.segment import Segment, fsync_dir, now_ms
from broker.wire import records
from broker.wire.records import BATCH_HEADER, CRC_START, HEADER_SIZE, LENGTH_SIZE, MIN_LENGTH

log = logging.getLogger("logferry.storage")

DELETED_SUFFIX = ".deleted"
"""A partition directory being deleted is first renamed to ``<name>.<id>.deleted``."""
TOPIC_ID_FILE = "topic-id"
"""Beside the segments: the topic incarnation the log belongs to (:attr:`PartitionLog.topic_id`)."""

_FIRST_READ = 64 * 1024  # read_slice: one pread that usually holds the whole first batch
_WALK_CHUNK = 1 << 20  # offset_for_time: bytes of batches read per pread while walking
_unpack_header = BATCH_HEADER.unpack_from


class FileSlice(NamedTuple):
    """A byte range of one segment file, ready for ``loop.sendfile``."""

    file: BinaryIO
    """The segment's read file object (do not close it; do not rely on its position)."""
    position: int
    """Byte position in the file where the range starts."""
    count: int  # type: ignore[assignment]  # a field named like tuple.count
    """Number of bytes to send; 0 when the offset is the visible end."""
    offset: int
    """Logical offset of the range's first byte (the offset asked for)."""


class PendingFlush:
    """A flush captured on the event loop, to be run (once) in a worker thread.

    It holds duplicated descriptors, so it stays valid if retention deletes or the log
    seals a segment before :meth:`run` gets to it; fsyncing an unlinked file is harmless.
    """

    __slots__ = ("end", "_fds", "_dirs", "_on_error")

    def __init__(self, end: int, fds: list[int], dirs: list[Path], on_error: Callable[[OSError], None]):
        self.end = end
        """The log end when the flush was prepared: visible once :meth:`run` returned."""
        self._fds = fds
        self._dirs = dirs
        self._on_error = on_error

    def run(self) -> None:
        """fsync the captured segment files, then directories that gained files.

        Blocking and thread-safe. On failure the log is told (it stops taking writes,
        see :meth:`PartitionLog.needs_recovery`) and the first OSError is raised; the
        descriptors are closed either way.
        """
        fds, self._fds = self._fds, []
        error: OSError | None = None
        for fd in fds:
            try:
                if error is None:
                    os.fsync(fd)
            except OSError as exc:
                error = exc
            _close_quietly(fd)
        try:
            if error is None:
                for directory in self._dirs:
                    fsync_dir(directory)
        except OSError as exc:
            error = exc
        if error is not None:
            self._on_error(error)
            raise error

    def settle(self, error: OSError | None) -> OSError | None:
        """The whole file system was synced instead of :meth:`run` (one ``syncfs`` for
        many logs, :mod:`broker.storage.sync`): close the descriptors and, if that sync
        failed, tell the log as :meth:`run` would. Returns ``error``."""
        fds, self._fds = self._fds, []
        for fd in fds:
            _close_quietly(fd)
        if error is not None:
            self._on_error(error)
        return error

    def __del__(self) -> None:
        for fd in self._fds:  # never run: do not leak the duplicates
            _close_quietly(fd)


class PartitionLog:
    """The append-only log of one partition, stored as segment files in ``directory``.

    ``recover`` says the log dir had no clean-shutdown marker: the tail of the last
    segment is then validated and a torn or corrupt end is cut (see
    :mod:`broker.storage.loader`). Bytes that survived are made visible at once; the
    caller should make them durable (:class:`~broker.storage.log_manager.LogManager`
    runs one ``sync`` after recovering).
    """

    def __init__(self, directory: Path, topic: str, partition: int, config: LogConfig, recover: bool):
        self.directory = Path(directory)
        self.topic = topic
        self.partition = partition
        self._on_write = False
        self.config = config  # the property: sets _on_write too
        self.name = partition_dir_name(topic, partition)
        new_dir = not self.directory.is_dir()
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            loaded = load_segments(self.directory, self.name, recover)
        except OSError as exc:
            raise StorageError(f"cannot open partition {self.name} in {self.directory}: {exc}") from exc
        self._segments = loaded.segments
        self._bases = [s.base_offset for s in self._segments]
        try:
            if loaded.created:  # its empty index needs no file yet (0 from byte 0); no stale one
                message_offsets.remove_orphans(self.directory, set(), self.name)
            else:
                message_offsets.load_indexes(self.directory, self._segments, self.name)
        except (OSError, StorageError) as exc:
            for seg in self._segments:
                seg.close()
            raise StorageError(f"cannot index partition {self.name} in {self.directory}: {exc}") from exc
        self._msg_bases = [s.index.base_message for s in self._segments]
        self._end = self._segments[-1].end_offset
        self._flushed_end = self._end
        self._hw_cap: int | None = None
        self._visible_hint: tuple[int, Segment, int, int] | None = None
        """(generation, segment, byte position in it, message offset relative to its first)
        of the last :attr:`visible_end_message` below the log end: the next one walks on
        from there, the same segment and generation only."""
        self.generation = 0
        """Counts the times bytes of this log were cut or replaced (truncation, restart)
        or its start moved inside a segment (:meth:`delete_records_before`): a cache of
        (message offset, byte offset) pairs kept outside the log is stale once it
        changes. Appends and retention leave every kept pair true."""
        self._start: LogStart | None = None
        """The log start when it lies past the first segment's first message
        (:mod:`broker.storage.log_start`); None: the first segment starts the log."""
        self.messages_appended = loaded.scanned_messages
        """Messages appended since open, plus those recovery validated."""
        self.bytes_appended = loaded.scanned_bytes
        """Bytes of those messages' batches."""
        self.unflushed_messages = 0
        self.unflushed_bytes = 0
        self._oldest_unflushed_ms = 0
        self._dirty: list[Segment] = []  # segments with unflushed bytes, in log order
        self._dirty_dirs: list[Path] = []  # directories whose entries changed since flush
        if new_dir:
            self._dirty_dirs += [self.directory.parent, self.directory]
        elif loaded.created:
            self._dirty_dirs.append(self.directory)
        self._failure: str | None = None
        self._topic_id = self._read_topic_id()
        self.producers: ProducerStateTable = producer_snapshots.load_state(
            self.directory, self.name, self._segments, clean=not recover
        )
        """Idempotent producers' last batches here (:mod:`broker.storage.producer_state`)."""
        self._load_start()

    # -- offsets and sizes ----------------------------------------------------------------

    @property
    def start_offset(self) -> int:
        """Offset of the first retained byte: the first segment's base offset, or the
        batch holding :attr:`start_message` when records were deleted up to it."""
        start = self._start
        return self._bases[0] if start is None else start.offset

    @property
    def end_offset(self) -> int:
        """Offset just after the last appended byte: where the next append goes."""
        return self._end

    @property
    def start_message(self) -> int:
        """Message offset of the first retained message (see
        :mod:`broker.storage.offset_index`); records deleted up to a message
        (:meth:`delete_records_before`) move it there."""
        start = self._start
        return self._segments[0].index.base_message if start is None else start.message

    @property
    def moved_start(self) -> LogStart | None:
        """The start when it was moved inside the first segment
        (:meth:`delete_records_before`), which a leader tells its followers; None when
        the first segment's first message starts the log."""
        return self._start

    @property
    def end_message(self) -> int:
        """Message offset the next appended message gets."""
        return self._segments[-1].index.end_message

    @property
    def config(self) -> LogConfig:
        """The log's settings (a topic's overrides apply by assigning new ones)."""
        return self._config

    @config.setter
    def config(self, config: LogConfig) -> None:
        self._config = config
        self._on_write = config.visibility == VISIBILITY_WRITTEN

    @property
    def visible_on_write(self) -> bool:
        """True when appended bytes are visible at once (``visibility = "written"``), so
        whoever appends wakes the consumers' long polls; False: a flush publishes them."""
        return self._on_write

    @property
    def visible_end(self) -> int:
        """High watermark: consumers may read offsets below it (see the module docstring)."""
        cap = self._hw_cap
        end = self.publishable_end
        return end if cap is None or cap > end else cap

    @property
    def publishable_end(self) -> int:
        """The end this log's visibility rule allows, before replication's cap: the log
        end or the flushed end."""
        return self._end if self._on_write else self._flushed_end

    @property
    def flushed_end(self) -> int:
        """Offset below which every byte is fsynced."""
        return self._flushed_end

    def set_high_watermark(self, cap: int | None) -> None:
        """Cap the visible end at ``cap`` (replication's high watermark); None: no cap."""
        self._hw_cap = cap

    @property
    def topic_id(self) -> int | None:
        """Which incarnation of the topic this log belongs to: the creation zxid of its
        ZooKeeper znode, as recorded in the directory (None: not recorded yet). A topic
        deleted and created again under the same name gets another one."""
        return self._topic_id

    def _read_topic_id(self) -> int | None:
        try:
            return int((self.directory / TOPIC_ID_FILE).read_text())
        except (OSError, ValueError):
            return None

    def set_topic_id(self, topic_id: int) -> None:
        """Record the topic incarnation: written and renamed into place now (called on
        the event loop: no fsync here), made durable by the log's next flush."""
        path = self.directory / TOPIC_ID_FILE
        tmp = path.with_name(TOPIC_ID_FILE + ".tmp")
        try:
            tmp.write_text(str(topic_id))
            os.replace(tmp, path)
            self._topic_id = topic_id
            if self.directory not in self._dirty_dirs:
                self._dirty_dirs.append(self.directory)
        except OSError as exc:
            raise StorageError(f"cannot record the topic id of {self.name} in {self.directory}: {exc}") from exc

    @property
    def size_bytes(self) -> int:
        """Bytes held by the log's segments."""
        return self._end - self._bases[0]

    @property
    def avg_message_bytes(self) -> float | None:
        """Average stored bytes per message (batch overhead included), if known."""
        if not self.messages_appended:
            return None
        return self.bytes_appended / self.messages_appended

    @property
    def segments(self) -> tuple[Segment, ...]:
        """The open segments in offset order (the last one is active)."""
        return tuple(self._segments)

    @property
    def needs_recovery(self) -> bool:
        """True once a write or fsync failed: no more writes; the next start recovers."""
        return self._failure is not None

    # -- appending and flushing -----------------------------------------------------------

    def append(
        self,
        message_set: bytes | memoryview,
        messages: int,
        producers: list[records.ProducerInfo] | None = None,
        txns: list[records.TxnInfo] | None = None,
    ) -> int:
        """Append whole, already validated batches; returns the offset of their first byte.

        ``producers``: the set's magic 2 batches (:attr:`records.ScanResult.producers`),
        recorded in :attr:`producers` once appended (the leader checked them first with
        :meth:`check_producers`; a follower records what its leader appended).
        ``txns``: its transactional batches (:attr:`records.ScanResult.txns`), recorded
        in the producer state's transaction index (open and aborted transactions).

        Rolls to a new segment first if the active one is non-empty and would outgrow
        ``segment_bytes`` or is older than ``segment_ms``. On a write error (disk full)
        the segment is cut back to its previous size and StorageError is raised; the
        log is unchanged.
        """
        if self._failure is not None:
            raise StorageError(self._failure)
        size = len(message_set)
        now = now_ms()
        seg = self._segments[-1]
        if seg.size and (seg.size + size > self.config.segment_bytes or now - seg.created_ms > self.config.segment_ms):
            seg = self._roll()
        offset = self._end
        try:
            seg.append(message_set)
        except OSError as exc:
            if seg.damaged:
                self._failure = (
                    f"partition {self.name} no longer accepts writes: a failed "
                    f"write left a partial batch at the end of {seg.path} "
                    f"({exc}); restart the broker to recover the log"
                )
                log.error("%s", self._failure)
                raise StorageError(self._failure) from exc  # freeing space is no cure
            raise write_error(
                exc, f"cannot append {size} bytes to partition {self.name} ({seg.path})", self.directory.parent
            ) from exc
        self._end = offset + size
        seg.index.note_append(size, messages)
        if not self.unflushed_bytes:
            self._oldest_unflushed_ms = now
        self.unflushed_messages += messages
        self.unflushed_bytes += size
        self.messages_appended += messages
        self.bytes_appended += size
        if not self._dirty or self._dirty[-1] is not seg:
            self._dirty.append(seg)
        if producers:
            self.producers.record(producers, offset)
        if txns:
            self.producers.record_txns(txns, offset)
        return offset

    def check_producers(self, producers: list[records.ProducerInfo], strict: bool = True) -> Held | None:
        """Before appending a produced set: None to append it, or which of its leading
        batches the log holds already (a producer's retry); OutOfOrderSequenceError or
        ProducerFencedError to refuse it (see :meth:`ProducerStateTable.check`; not
        ``strict``: a copied set, never refused)."""
        return self.producers.check(producers, self._end, strict)

    def flush_due(self, now_ms: int) -> bool:
        """True when ``flush_messages`` are unflushed or the oldest has waited ``flush_ms``."""
        return self.unflushed_messages >= self.config.flush_messages or (
            self.unflushed_bytes > 0 and now_ms - self._oldest_unflushed_ms >= self.config.flush_ms
        )

    @property
    def unflushed_files(self) -> int:
        """Segment files and directories the next flush has to sync."""
        return len(self._dirty) + len(self._dirty_dirs)

    def prepare_flush(self, whole_fs: bool = False) -> PendingFlush:
        """Capture the end and the files to fsync, and reset the unflushed counters.

        Appends made after this call belong to the next flush. ``whole_fs``: the caller
        syncs the log's whole file system itself (``syncfs``, :mod:`broker.storage.sync`)
        and settles the flush with :meth:`PendingFlush.settle`: no descriptor is captured.
        """
        fds: list[int] = []
        try:
            for seg in () if whole_fs else self._dirty:
                fds.append(seg.dup_fd())
        except OSError as exc:
            for fd in fds:
                _close_quietly(fd)
            raise StorageError(f"cannot flush partition {self.name}: {exc}") from exc
        active = self._segments[-1]
        for seg in self._dirty:
            if seg is not active:
                seg.seal()  # rolled: never written again, and its fsync is captured
        pending = PendingFlush(self._end, fds, self._dirty_dirs, self._flush_failed)
        self._dirty = []
        self._dirty_dirs = []
        self.unflushed_messages = 0
        self.unflushed_bytes = 0
        return pending

    def _flush_failed(self, exc: OSError) -> None:
        # Runs in the fsync thread. After a failed fsync the kernel may already have
        # dropped the unwritten pages, so a retry could "succeed" over lost data: stop
        # writing and leave the tail to the next start's recovery (no clean marker).
        self._failure = (
            f"partition {self.name} no longer accepts writes: fsync failed "
            f"({exc}); restart the broker to recover the log"
        )
        log.error("%s", self._failure)

    def mark_flushed(self, end: int) -> None:
        """Publish a completed flush: bytes below ``end`` are durable (and visible to
        consumers, unless they were at once)."""
        self._flushed_end = max(self._flushed_end, min(end, self._end))

    def flush(self) -> None:
        """Flush synchronously (prepare, fsync, publish); for shutdown and tests."""
        if self._failure is not None:
            raise StorageError(self._failure)
        if not self._dirty and not self._dirty_dirs and self._flushed_end == self._end:
            return
        pending = self.prepare_flush()
        try:
            pending.run()
        except OSError as exc:
            raise StorageError(f"fsync of partition {self.name} failed: {exc}") from exc
        self.mark_flushed(pending.end)

    # -- reading --------------------------------------------------------------------------

    def read_slice(self, offset: int, max_bytes: int, upto: int | None = None) -> FileSlice:
        """The file range to send for a fetch at ``offset`` of at most ``max_bytes``.

        The range lies inside one segment and below the visible end (below ``upto``
        instead when given: followers read up to the log end), and always holds
        the whole first batch, even one larger than ``max_bytes``, so a consumer never
        stalls on a big batch. The first batch's header and CRC are checked, which
        catches offsets that are not batch boundaries and never sends a corrupt batch
        first. The rest is sent unchecked: consumers verify every CRC.
        """
        start = self.start_offset
        visible = self.visible_end if upto is None else min(upto, self._end)
        if not start <= offset <= self._end:
            raise OffsetOutOfRangeError(
                f"offset {offset} is out of range for partition {self.name}: the valid "
                f"range is [{start}, {self.visible_end}]",
                start,
                self.visible_end,
            )
        seg = self._segments[bisect_right(self._bases, offset) - 1]
        pos = offset - seg.base_offset
        if offset >= visible:
            # At the end, or past the high watermark but inside the log (a new leader
            # whose watermark has not caught up yet): nothing to read yet.
            return FileSlice(seg.reader, pos, 0, offset)
        available = min(visible, seg.end_offset) - offset
        try:
            head = seg.read(pos, min(available, _FIRST_READ))
            length = self._first_batch_length(head, available, offset)
            if length > len(head):
                head = seg.read(pos, length)
        except OSError as exc:
            raise StorageError(f"cannot read partition {self.name} ({seg.path}) at offset {offset}: {exc}") from exc
        self._check_first_batch(head, length, offset)
        return FileSlice(seg.reader, pos, max(length, min(max_bytes, available)), offset)

    def _first_batch_length(self, head: bytes, available: int, offset: int) -> int:
        """Size of the batch that ``head`` starts with, or InvalidOffsetError."""
        problem = None
        length: int
        if len(head) < HEADER_SIZE:
            problem = f"only {len(head)} bytes follow it"
        else:
            length, magic = _unpack_header(head)[:2]
            if magic not in MIN_LENGTH:
                problem = f"no batch header there (magic byte {magic})"
            elif not MIN_LENGTH[magic] <= length <= records.MAX_BATCH_BYTES:
                problem = f"no batch header there (length field {length})"
            elif LENGTH_SIZE + length > available:
                problem = (
                    f"a batch there would need {LENGTH_SIZE + length} bytes but its "
                    f"segment has {available} readable bytes left"
                )
        if problem is not None:
            raise InvalidOffsetError(
                f"offset {offset} is not the start of a batch in partition {self.name}: "
                f"{problem}. Fetch from an offset a produce, offsets or fetch response "
                f"gave you."
            )
        return LENGTH_SIZE + length

    def _check_first_batch(self, head: bytes, length: int, offset: int) -> None:
        result = records.scan(head, 0, length)
        if result.error is None:
            return
        if zlib.crc32(memoryview(head)[CRC_START:length]) == _unpack_header(head)[2]:
            raise InvalidOffsetError(
                f"offset {offset} is not the start of a batch in partition {self.name}: {result.error}"
            )
        raise CorruptBatchError(
            f"the batch at offset {offset} of partition {self.name} "
            f"fails its CRC: the log is damaged there (or {offset} is "
            f"not the start of a batch)"
        )

    def read_bytes(self, offset: int, max_bytes: int) -> bytes:
        """Up to ``max_bytes`` of the log from ``offset`` (within one segment, below the
        log end); what a follower compares with its leader's bytes."""
        if not self._bases[0] <= offset < self._end:
            return b""
        seg = self._segments[bisect_right(self._bases, offset) - 1]
        n = min(max_bytes, seg.end_offset - offset)
        try:
            return seg.read(offset - seg.base_offset, n)
        except OSError as exc:
            raise StorageError(f"cannot read partition {self.name} ({seg.path}) at offset {offset}: {exc}") from exc

    # -- message offsets (offset_index) ----------------------------------------------------

    def message_offset_at(self, offset: int) -> int:
        """Message offset of the batch starting at byte ``offset`` (``end_message`` at
        the log end). OffsetOutOfRangeError outside the log, InvalidOffsetError if no
        batch starts there. Walks at most an index interval of batch headers."""
        if offset == self._end:
            return self.end_message
        start = self.start_offset
        if not start <= offset < self._end:
            raise OffsetOutOfRangeError(
                f"offset {offset} is out of range for partition {self.name}: the valid range is [{start}, {self._end}]",
                start,
                self._end,
            )
        seg = self._segments[bisect_right(self._bases, offset) - 1]
        return message_offsets.message_at(seg, offset - seg.base_offset, self.name)

    def batch_for_message(self, message: int) -> tuple[int, int]:
        """(byte offset of the batch holding message offset ``message``, how many of that
        batch's messages come before it); ``(end_offset, 0)`` for ``end_message``.
        OffsetOutOfRangeError (its start and end in message offsets) outside the log."""
        end = self.end_message
        if message == end:
            return self._end, 0
        start = self.start_message
        if not start <= message < end:
            raise OffsetOutOfRangeError(
                f"message offset {message} is out of range for partition {self.name}: "
                f"the valid range is [{start}, {end}]",
                start,
                end,
            )
        seg = self._segments[bisect_right(self._msg_bases, message) - 1]
        pos, skip = message_offsets.find_message(seg, message - seg.index.base_message)
        return seg.base_offset + pos, skip

    @property
    def visible_end_message(self) -> int:
        """Message offset at :attr:`visible_end` (the high watermark in messages).

        At the log end it is :attr:`end_message` (no walk). Below it (a high watermark
        waiting for a follower, an unflushed tail), a dashboard asking once a second for
        hundreds of partitions would walk up to an index interval of batch headers each
        time: the walk goes on from the previous answer's batch instead, when it is in the
        same segment and nothing was cut since (:attr:`generation`)."""
        generation = self.generation  # read first: a cut during the walk leaves the hint stale-marked
        end = self.visible_end
        if end == self._end or end < self._bases[0]:
            return self.message_offset_at(end)
        seg = self._segments[bisect_right(self._bases, end) - 1]
        pos = end - seg.base_offset
        hint = self._visible_hint
        near = (hint[2], hint[3]) if hint is not None and hint[0] == generation and hint[1] is seg else None
        if near is not None and near[0] == pos:  # not moved since
            return seg.index.base_message + near[1]
        message = message_offsets.message_at(seg, pos, self.name, near)
        self._visible_hint = (generation, seg, pos, message - seg.index.base_message)
        return message

    def batch_start_at_or_before(self, offset: int) -> int:
        """The start of the last batch beginning at or before ``offset`` (the log start
        if there is none); walks the headers of one segment."""
        offset = min(offset, self._end)
        if offset <= self.start_offset:
            return self.start_offset
        seg = self._segments[bisect_right(self._bases, offset - 1) - 1]
        pos, last = 0, seg.base_offset
        limit = offset - seg.base_offset
        while pos < limit:
            head = seg.read(pos, HEADER_SIZE)
            if len(head) < HEADER_SIZE:
                break
            last = seg.base_offset + pos
            pos += LENGTH_SIZE + _unpack_header(head)[0]
        if pos == limit:
            return offset
        return last

    def last_batch(self) -> tuple[int, bytes] | None:
        """The offset and bytes of the log's last batch (None: the log is empty); what
        a mirror compares with its source's batch at that offset. Walks the headers of
        the segment that holds it."""
        if self._end == self.start_offset:
            return None
        offset = self.batch_start_at_or_before(self._end - 1)
        return offset, self.read_bytes(offset, self._end - offset)

    def restart_at(self, offset: int, message: int | None = None) -> None:
        """Drop the whole log and continue empty at ``offset`` (a follower whose leader's
        log starts past this one's end: retention there deleted what it still needs).

        ``message``: the message offset the log continues at (the leader's at
        ``offset``); None: ``offset`` itself, as for a log whose count is unknown (see
        :func:`broker.storage.offset_index.chain_bases`)."""
        if self._failure is not None:
            raise StorageError(self._failure)
        try:
            for seg in self._segments:
                seg.delete()
            self._segments = [self._create_first(offset, offset if message is None else message)]
            fsync_dir(self.directory)
        except OSError as exc:
            self._failure = (
                f"partition {self.name} no longer accepts writes: restarting "
                f"it at offset {offset} failed ({exc}); restart the broker"
            )
            raise StorageError(self._failure) from exc
        self._bases = [offset]
        self._msg_bases = [self._segments[0].index.base_message]
        self._forget_start()
        self.generation += 1
        self._dirty = []
        self._end = self._flushed_end = offset
        self.producers = ProducerStateTable(self.name)
        producer_snapshots.drop_snapshots_after(self.directory, -1)
        self._hw_cap = None if self._hw_cap is None else offset
        log.warning("%s: log restarted empty at offset %d", self.name, offset)

    def truncate_to(self, offset: int) -> int:
        """Cut the log back to ``offset`` (a batch boundary); returns the bytes cut.

        For a follower whose tail its leader does not have. Below the log start the
        whole log goes and restarts empty at ``offset``. The cut is fsynced at once.
        """
        if offset >= self._end:
            return 0
        if self._failure is not None:
            raise StorageError(self._failure)
        cut = self._end - offset
        if self._start is not None and offset < self._start.offset:
            self._forget_start()  # the leader does not have it: it tells the start again
        try:
            if offset <= self._bases[0]:
                # The same first message at the log start; below it the count is unknown.
                message = self._segments[0].index.base_message if offset == self._bases[0] else offset
                for seg in self._segments:
                    seg.delete()
                self._segments = [self._create_first(offset, message)]
            else:
                while self._segments[-1].base_offset >= offset:
                    self._segments.pop().delete()
                last = self._segments[-1]
                last.truncate(offset - last.base_offset)
                last.open_for_append()
                last.fsync()
                message_offsets.cut(last, last.size)
                message_offsets.save(last, fsync=True)  # never an old index over new bytes
            fsync_dir(self.directory)
        except OSError as exc:
            self._failure = (
                f"partition {self.name} no longer accepts writes: truncating "
                f"to offset {offset} failed ({exc}); restart the broker"
            )
            log.error("%s", self._failure)
            raise StorageError(self._failure) from exc
        self._bases = [s.base_offset for s in self._segments]
        self._msg_bases = [s.index.base_message for s in self._segments]
        self.generation += 1
        self.producers.truncate_to(offset)
        producer_snapshots.drop_snapshots_after(self.directory, offset)
        live = set(map(id, self._segments))
        self._dirty = [s for s in self._dirty if id(s) in live]
        self._end = offset
        self._flushed_end = min(self._flushed_end, offset)
        if self._hw_cap is not None:
            self._hw_cap = min(self._hw_cap, offset)
        log.warning("%s: truncated %d bytes, the log now ends at %d", self.name, cut, offset)
        return cut

    def offset_for_time(self, ts_ms: int) -> int:
        """Offset of the last batch whose base timestamp is <= ``ts_ms``.

        ``start_offset`` if every batch is later (or the last such batch lies below
        it); ``visible_end`` if nothing is visible.
        The answer is the last such batch even when it is the last batch of the log:
        headers carry only a batch's first timestamp, so its later messages may still be
        at or after ``ts_ms``, and the client skips the earlier ones (see
        ``SimpleConsumer.position_for_time``).
        The first batch of each segment picks the segment; batch headers are then
        walked in 1 MiB reads. Assumes timestamps grow along the log, as producers'
        clocks make them. Safe to call from a worker thread: it works on a snapshot.
        """
        segments = list(self._segments)
        visible = self.visible_end
        try:
            chosen = None
            for seg in reversed(segments):
                if seg.base_offset < visible:
                    first = seg.first_timestamp()
                    if first is not None and first <= ts_ms:
                        chosen = seg
                        break
            start = self.start_offset
            if chosen is None:
                return start
            return max(self._walk_timestamps(chosen, ts_ms, visible), start)
        except (OSError, ValueError) as exc:  # ValueError: file closed by a shutdown
            raise StorageError(f"cannot search partition {self.name} by time: {exc}") from exc

    def _walk_timestamps(self, seg: Segment, ts_ms: int, visible: int) -> int:
        """Walk ``seg`` below ``visible``: the last batch whose base timestamp is <= ts_ms."""
        limit = min(seg.size, visible - seg.base_offset)
        pos = 0
        last = seg.base_offset
        while pos < limit:
            chunk = seg.read(pos, min(_WALK_CHUNK, limit - pos))
            end = len(chunk)
            if end < HEADER_SIZE:
                break
            i = 0
            while end - i >= HEADER_SIZE:
                length, magic, _, _, _, base_ts = _unpack_header(chunk, i)
                if magic not in MIN_LENGTH or length < MIN_LENGTH[magic]:
                    raise CorruptBatchError(
                        f"malformed batch header at offset {seg.base_offset + pos + i} of "
                        f"partition {self.name} ({seg.path})"
                    )
                if base_ts > ts_ms:
                    return last
                last = seg.base_offset + pos + i
                i += LENGTH_SIZE + length
            pos += i
        return last

    # -- rolling and retention ------------------------------------------------------------

    def _create_first(self, offset: int, message: int) -> Segment:
        """A new, empty first segment at byte ``offset`` whose first message is
        ``message``, its index header fsynced (it is the only record of ``message``)."""
        seg = Segment.create(self.directory, offset)
        seg.index.base_message = message
        message_offsets.save(seg, fsync=True)
        return seg

    def maybe_roll(self, now_ms: int) -> None:
        """Roll the active segment if it is non-empty and older than ``segment_ms``."""
        active = self._segments[-1]
        if active.size and now_ms - active.created_ms > self.config.segment_ms:
            self._roll()

    def _roll(self) -> Segment:
        old = self._segments[-1]
        try:
            new = Segment.create(self.directory, self._end)
        except OSError as exc:
            raise write_error(
                exc, f"cannot roll partition {self.name} to a new segment in {self.directory}", self.directory.parent
            ) from exc
        if not self._dirty or self._dirty[-1] is not old:
            old.seal()  # fully flushed; otherwise prepare_flush seals it
        new.index.base_message = old.index.end_message
        message_offsets.save_quietly(old, self.name)
        message_offsets.save_quietly(new, self.name)
        self._segments.append(new)
        self._bases.append(new.base_offset)
        self._msg_bases.append(new.index.base_message)
        self._dirty_dirs.append(self.directory)
        if self.producers.producers or self.producers.txns:
            producer_snapshots.write_snapshot(self.directory, self.producers, self._end)
        log.info("%s: rolled to segment %s after %d bytes", self.name, new.path.name, old.size)
        return new

    def enforce_retention(self, now_ms: int) -> list[Path]:
        """Delete old segments by age and by size; returns the deleted files' paths.

        Only whole segments from the start go, so ``start_offset`` moves forward and
        fetches below it get OffsetOutOfRangeError. The log keeps at least one segment;
        an active segment past ``retention_ms`` is rolled first so that it can go. A log
        whose ``cleanup_policy`` is ``compact`` is never deleted by retention.
        """
        cfg = self.config
        deleted: list[Path] = []
        if cfg.cleanup_policy == "compact":
            return deleted
        try:
            active = self._segments[-1]
            if active.size and now_ms - active.last_modified_ms > cfg.retention_ms:
                self._roll()
            while len(self._segments) > 1:
                age = now_ms - self._segments[0].last_modified_ms
                if age <= cfg.retention_ms:
                    break
                deleted.append(
                    self._delete_first(
                        f"not modified for {age / 3.6e6:.1f} h, retention is {cfg.retention_ms / 3.6e6:g} h"
                    )
                )
        except OSError as exc:
            raise StorageError(f"retention on partition {self.name} failed: {exc}") from exc
        if cfg.retention_bytes >= 0:
            try:
                while len(self._segments) > 1 and self.size_bytes > cfg.retention_bytes:
                    deleted.append(
                        self._delete_first(f"log holds {self.size_bytes} bytes, retention is {cfg.retention_bytes}")
                    )
            except OSError as exc:
                raise StorageError(f"retention on partition {self.name} failed: {exc}") from exc
        if deleted:
            self.producers.expire_before(self._bases[0])
            self._check_start()
        return deleted

    # -- deleting records up to a message (Kafka's DeleteRecords) ------------------------

    def delete_records_before(self, message: int) -> LogStart:
        """Start the log at message offset ``message``: every message below it is gone
        for readers of either protocol, and the segments wholly below it are deleted.
        The start is recorded durably first (:mod:`broker.storage.log_start`), so it
        holds after a restart. A ``message`` at or below the start changes nothing.
        Returns the log start. OffsetOutOfRangeError past :attr:`end_message`;
        StorageError if the start cannot be recorded (then nothing changed)."""
        if message > self.start_message:
            offset, skip = self.batch_for_message(message)
            self._move_start(LogStart(offset, message, message - skip), "records deleted before it")
        return self._start or LogStart(self.start_offset, self.start_message, self.start_message)

    def advance_start(self, offset: int, message: int) -> bool:
        """A follower takes its leader's start (byte offset ``offset`` of the batch
        holding message ``message``) when it is past its own and inside its log: the
        same records are then gone on every replica. Returns whether it moved."""
        if message <= self.start_message or not self.start_offset <= offset <= self._end:
            return False
        if message > self.end_message:
            return False
        batch_message = self.message_offset_at(offset)  # the same batches as the leader's
        if not batch_message <= message:
            return False
        self._move_start(LogStart(offset, message, batch_message), "the leader's log starts there")
        return True

    def _move_start(self, start: LogStart, reason: str) -> None:
        if self._failure is not None:
            raise StorageError(self._failure)
        try:
            write_log_start(self.directory, start)
        except OSError as exc:
            what = f"cannot record the new start of partition {self.name}"
            raise write_error(exc, what, self.directory.parent) from exc
        self._start = start
        self.generation += 1
        log.info("%s: log now starts at message %d (byte %d): %s", self.name, start.message, start.offset, reason)
        deleted = False
        try:
            while len(self._segments) > 1 and self._bases[1] <= start.offset:
                self._delete_first(f"below the log start {start.message}")
                deleted = True
        except OSError as exc:  # the start holds; the next move or restart deletes them
            log.error("%s: could not delete the segments below the log start: %s", self.name, exc)
        if deleted:
            self.producers.expire_before(self._bases[0])
        self._check_start()

    def _load_start(self) -> None:
        """Take the recorded start if it names a batch of this log past its first
        message; delete the segments wholly below it (a crash may have left them)."""
        start = read_log_start(self.directory, self.name)
        if start is None:
            return
        if not self._bases[0] <= start.offset <= self._end or not (
            self._segments[0].index.base_message <= start.message <= self.end_message
        ):
            log.warning(
                "%s: ignoring the recorded log start %s: the log holds bytes %d-%d, messages %d-%d",
                self.name,
                start,
                self._bases[0],
                self._end,
                self._segments[0].index.base_message,
                self.end_message,
            )
            remove_log_start(self.directory)
            return
        self._start = start
        try:
            while len(self._segments) > 1 and self._bases[1] <= start.offset:
                self._delete_first(f"below the log start {start.message}")
        except OSError as exc:
            log.error("%s: could not delete the segments below the log start: %s", self.name, exc)
        self._check_start()

    def _check_start(self) -> None:
        """Forget a recorded start that the first segment reached (retention deleted
        up to it or past it)."""
        start = self._start
        if start is not None and start.message <= self._segments[0].index.base_message:
            self._forget_start()

    def _forget_start(self) -> None:
        if self._start is not None:
            self._start = None
            remove_log_start(self.directory)

    def _delete_first(self, reason: str) -> Path:
        # The next segment's index header becomes the only record of how many messages
        # came before it: durable before the segment goes (raises OSError: kept then).
        message_offsets.save(self._segments[1], fsync=True)
        fsync_dir(self.directory)
        seg = self._segments.pop(0)
        del self._bases[0]
        del self._msg_bases[0]
        self._dirty = [s for s in self._dirty if s is not seg]
        self._flushed_end = max(self._flushed_end, self._bases[0])
        try:
            seg.delete()
        except OSError as exc:
            log.error("%s: could not delete segment %s: %s", self.name, seg.path, exc)
        log.info(
            "%s: deleted segment %s (offsets %d-%d, %d bytes): %s; log now starts at %d",
            self.name,
            seg.path.name,
            seg.base_offset,
            seg.end_offset,
            seg.size,
            reason,
            self._bases[0],
        )
        return seg.path

    # -- lifecycle ------------------------------------------------------------------------

    def close(self) -> None:
        """Flush, then close every file. Raises StorageError if the flush fails."""
        try:
            if self._failure is None:
                self.flush()
                if self.producers.producers or self.producers.txns:
                    producer_snapshots.write_snapshot(self.directory, self.producers, self._end)
                for seg in self._segments:
                    if seg.index.saved_size != seg.index.size:
                        message_offsets.save_quietly(seg, self.name)
        finally:
            for seg in self._segments:
                seg.close()

    def delete(self) -> None:
        """Remove the partition with its directory; fetches in flight finish sending.

        The directory is renamed first, so a crash halfway leaves a ``*.deleted``
        directory that the next load removes, never a partition with holes.
        """
        for seg in self._segments:
            seg.seal()  # read files stay open until the last fetch drops them
        doomed = self.directory.with_name(f"{self.directory.name}.{uuid.uuid4().hex[:12]}{DELETED_SUFFIX}")
        try:
            os.rename(self.directory, doomed)
            fsync_dir(self.directory.parent)
            shutil.rmtree(doomed)
        except OSError as exc:
            raise StorageError(f"cannot delete partition {self.name} in {self.directory}: {exc}") from exc
        log.info("%s: deleted the partition's log (%s)", self.name, self.directory)

    def __repr__(self) -> str:
        return f"PartitionLog({self.name}, start={self.start_offset}, flushed={self._flushed_end}, end={self._end})"


NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
"""A write refused for want of space: the file system is full, or a quota is used up."""


def write_error(exc: OSError, what: str, log_dir: Path) -> StorageError:
    """The error for a failed write to a log in ``log_dir``: :class:`DiskFullError` when
    the file system has no space left (the caller cut the log back, so nothing was
    written and freeing space is the cure), :class:`StorageError` otherwise."""
    reason = exc.strerror or str(exc)
    if exc.errno in NO_SPACE_ERRNOS:
        return DiskFullError(f"log dir {log_dir} is full: {what}: {reason}", log_dir=str(log_dir))
    return StorageError(f"{what}: {exc}")


def _close_quietly(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)
