"""One tailed file: its handle, read position, line pipeline and acknowledgement state.

A :class:`TailedFile` is the IO shell around the sans-IO pieces for one file:
``pread`` big chunks at the read position, run them through the
:class:`~agent.lines.LineSplitter` (and a :class:`~agent.multiline.MultilineJoiner`
when the source has a rule), replace invalid UTF-8, parse times, and encode the
message values in bulk. The runtime decides when to read, send and close; this
module only knows how.

Offsets, all file offsets:

* ``pos``: the next byte to read.
* ``emitted``: the first byte not yet in a message handed to the producer (the end of
  the last chunk); bytes between ``emitted`` and ``pos`` are held (a partial line, a
  multiline message being built).
* ``acks.acked``: the checkpoint; every byte before it is acknowledged.

``acked <= emitted <= pos`` always holds.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import NamedTuple

from agent import encode, parsing
from agent.acks import AckTracker
from agent.config import SourceConfig
from agent.identity import EMPTY, FileKey, Fingerprint, fingerprint, new_file_id
from agent.lines import Lines, LineSplitter
from agent.multiline import MultilineJoiner


class Outgoing(NamedTuple):
    """Messages ready for one ``send`` call."""

    values: list[bytes]
    offsets: list[int]
    """File offset where each message starts."""
    start: int
    end: int
    nbytes: int
    time_ms: int
    utf8_replaced: int
    parse_failed: tuple[int, ...] = ()
    """Indexes of the messages whose line did not parse (the source's ``parse``)."""


class TailedFile:
    """State and IO for one file; see the module docstring."""

    def __init__(
        self,
        key: FileKey,
        path: str,
        where: str,
        source: SourceConfig,
        source_index: int,
        host: str,
        offset: int = 0,
        fp: Fingerprint = EMPTY,
        file_id: int | None = None,
    ):
        self.key = key
        self.path = path
        """The path the file was found under: what its messages carry in ``file``."""
        self.where: str | None = where
        """Where the file is now, as far as we know (None: rotated somewhere unknown)."""
        self.source = source
        self.source_index = source_index
        self.host = host
        self.fp = fp
        self.file_id = new_file_id() if file_id is None else file_id
        """This generation's id, in every message (``fid``); see :mod:`agent.identity`."""
        self.file_id_saved = file_id is not None
        """``file_id`` is in the checkpoint on disk (a new one must be before a line
        carrying it is sent, so that a restart re-sends the line with the same id)."""
        self.held_by_cluster: tuple[int, int] | None = None
        """``(fid, offset)``: after a crash the cluster holds this generation's lines up
        to the one at ``offset``; they are skipped, not sent again (agent.resume)."""
        self.fd: int | None = None
        self.pos = offset
        self.emitted = offset
        self.size = offset
        """Size at the last stat."""
        self.mtime_ns = 0
        """Modification time at the last stat of a closed file."""
        self.acks = AckTracker(offset)
        self._build_pipeline(offset)
        self.rotated = False
        """The discovery path no longer names this file."""
        self.deleted = False
        """The file has no name left (st_nlink == 0): read to the end, then forget it."""
        self.waiting_for: TailedFile | None = None
        """A predecessor (rotated away from our path) to finish before reading this one."""
        self.at_eof = False
        self.reached_eof_once = False
        self.last_data = time.monotonic()
        self.last_used = self.last_data
        self.held = 0
        """Bytes held by the splitter and joiner."""
        self.counted_held = 0
        """The part of ``held`` the runtime has added to its in-flight total."""
        self.expansion = 2.0
        """Encoded bytes per byte read, from the last big read (sizes reads under the cap)."""
        self.retry_at = 0.0
        """After a failed batch, do not re-read before this monotonic time."""
        self.failures = 0
        self.fail_offset = -1
        self._held_ascii = False
        """Every byte held from earlier chunks is ASCII (so needs no UTF-8 check)."""
        self._prefix_time = -1
        self._prefix = b""

    # -- handle -------------------------------------------------------------------------

    def open(self) -> os.stat_result:
        """Open ``where`` read-only; return its fstat. Raises OSError."""
        assert self.where is not None
        fd = os.open(self.where, os.O_RDONLY | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
        except OSError:
            os.close(fd)
            raise
        self.fd = fd
        self.last_used = time.monotonic()
        return st

    def close(self) -> None:
        """Close the handle (state is kept; a later open resumes at ``pos``)."""
        if self.fd is not None:
            with contextlib.suppress(OSError):
                self.mtime_ns = os.fstat(self.fd).st_mtime_ns
            try:
                os.close(self.fd)
            finally:
                self.fd = None

    def head(self, length: int) -> bytes:
        """The first ``length`` bytes through the open handle."""
        assert self.fd is not None
        return os.pread(self.fd, length, 0) if length else b""

    def grow_fingerprint(self, limit: int) -> None:
        """Extend the fingerprint to ``limit`` bytes once the file is that long."""
        if self.fp.length < limit and self.fd is not None and self.size > self.fp.length:
            self.fp = fingerprint(self.head(limit))

    def read(self, size: int) -> bytes:
        """Read up to ``size`` bytes at ``pos`` (advancing it)."""
        assert self.fd is not None
        data = os.pread(self.fd, size, self.pos)
        self.pos += len(data)
        self.last_used = time.monotonic()
        if data:
            self.last_data = self.last_used
            if self.pos > self.size:
                self.size = self.pos
        return data

    def new_generation(self) -> None:
        """The file was truncated or replaced: its lines from now on get a new id."""
        self.file_id = new_file_id()
        self.file_id_saved = False
        self._prefix_time = -1

    # -- pipeline -----------------------------------------------------------------------

    def _build_pipeline(self, offset: int) -> None:
        """The source's line rules: splitter, multiline joiner, time parser, fields."""
        source = self.source
        self.splitter = LineSplitter(source.max_line_bytes, offset)
        rule = source.multiline
        self.joiner = MultilineJoiner(rule.continuation, rule.start, rule.max_bytes) if rule is not None else None
        self.parser = (
            encode.TimeParser(source.time_pattern, source.time_format or "", source.time_zone)
            if source.time_pattern
            else None
        )
        static = dict(source.fields)
        self.fields = (
            parsing.FieldParser(source.parse.format, source.parse.regex, static) if source.parse is not None else None
        )
        self._static = parsing.pack_fields(static) if static and self.fields is None else b""

    def set_source(self, source: SourceConfig, index: int) -> None:
        """Follow a reloaded source (SIGHUP): its rules apply from ``emitted`` on.

        Bytes held (a partial line, a multiline message being built) are dropped and
        read again under the new rules; every byte before ``emitted`` is already in a
        message, so nothing is sent twice or skipped. The caller releases what the file
        held from the in-flight count."""
        self.source = source
        self.source_index = index
        self._build_pipeline(self.emitted)
        self._prefix_time = -1
        self.restart_at(self.emitted)

    def restart_at(self, offset: int) -> None:
        """Read again from ``offset``, dropping what is held (the reader's view only)."""
        self._held_ascii = False
        self.pos = offset
        self.emitted = offset
        self.splitter.reset(offset)
        if self.joiner is not None:
            self.joiner.reset()
        self.held = 0
        self.at_eof = False

    def feed(self, data: bytes, time_ms: int) -> Outgoing | None:
        """Turn the bytes just read into messages; None when they complete none."""
        # The chunk may vouch for its lines' UTF-8 (one C-speed check) only if the bytes
        # held from earlier chunks, which start its first line, were clean too.
        nothing_held = self.splitter.held_bytes == 0 and (self.joiner is None or self.joiner.held_bytes == 0)
        fresh = nothing_held or self._held_ascii
        self._held_ascii = fresh and data.isascii()
        lines = self.splitter.feed(data)
        if self.joiner is not None:
            lines = self.joiner.feed(lines)
        return self._outgoing(lines, time_ms, data if fresh else None)

    def flush_held(self, time_ms: int) -> Outgoing | None:
        """Emit the held partial line and multiline message (the file went quiet)."""
        lines = self.splitter.flush()
        if self.joiner is not None:
            joined = self.joiner.feed(lines) if lines.lines else lines
            tail = self.joiner.flush(self.splitter.held_from)
            lines = Lines(
                joined.lines + tail.lines,
                joined.offsets + tail.offsets,
                joined.cut | frozenset(i + len(joined.lines) for i in tail.cut),
                tail.end,
            )
        return self._outgoing(lines, time_ms, None)

    def _outgoing(self, lines: Lines, time_ms: int, whole: bytes | None) -> Outgoing | None:
        self.held = self.splitter.held_bytes + (self.joiner.held_bytes if self.joiner else 0)
        if not lines.lines:
            return None
        texts = encode.valid_utf8(lines.lines, whole)
        replaced = 0 if texts is lines.lines else sum(a is not b for a, b in zip(texts, lines.lines, strict=True))
        if time_ms != self._prefix_time:
            self._prefix = encode.chunk_prefix(time_ms, self.host, self.path, self._static, file_id=self.file_id)
            self._prefix_time = time_ms
        ptimes = self.parser.parse_all(texts) if self.parser is not None else None
        parsed, failed = self.fields.entries(texts) if self.fields is not None else (None, [])
        values = encode.encode_values(self._prefix, texts, lines.offsets, lines.cut, ptimes, parsed)
        start = self.emitted
        self.emitted = lines.end
        return Outgoing(
            values, lines.offsets, start, lines.end, sum(map(len, values)), time_ms, replaced, tuple(failed)
        )

    def trim(self, out: Outgoing, room: int) -> Outgoing | None:
        """Keep the leading messages of ``out`` that fit in ``room`` bytes; read the rest again.

        This is what makes ``max_inflight_bytes`` a hard bound: a chunk whose messages
        would not fit is cut at a message boundary and the file position moves back to
        the first message left out (held bytes after it are dropped and re-read too).
        """
        total = 0
        keep = 0
        for size in map(len, out.values):
            if total + size > room:
                break
            total += size
            keep += 1
        resume = out.offsets[keep]
        self.restart_at(resume)
        if keep == 0:
            return None
        return out._replace(
            values=out.values[:keep],
            offsets=out.offsets[:keep],
            end=resume,
            nbytes=total,
            parse_failed=tuple(i for i in out.parse_failed if i < keep),
        )

    # -- state --------------------------------------------------------------------------

    @property
    def draining(self) -> bool:
        """Rotated or deleted: no new data expected once read to the end."""
        return self.rotated or self.deleted

    @property
    def lag(self) -> int:
        """Bytes of the file (at the last stat) not yet acknowledged."""
        return max(self.size - self.acks.acked, 0)

    def __repr__(self) -> str:
        return f"TailedFile({self.path!r}, ino={self.key.ino}, pos={self.pos}, acked={self.acks.acked}, fd={self.fd})"
