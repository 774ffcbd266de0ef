"""Opening a partition directory: find its segments, check them, recover a crashed tail.

After a clean shutdown every segment was fsynced, so opening is a directory listing and
one ``fstat`` per segment. After a crash (no clean-shutdown marker in the log dir) the
last segment may end in a torn or corrupt batch: it is walked batch by batch with
:func:`broker.wire.records.scan` and cut at the first bad byte, and what was cut is logged.

Only the tail needs this. A flush fsyncs every segment written since the previous one,
in log order, and the log grows only at its end; so bytes that were ever flushed are
intact, and whatever a crash damaged lies after them. One more crash artefact is
handled: a segment that lost its unflushed end while the next one was already created
leaves a break in the offsets (``base + size`` of a segment differs from the next base);
the log is then cut at the break, since everything after it was never flushed.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
from dataclasses import dataclass
from pathlib import Path

from broker.common.errors import StorageError
from broker.storage.segment import Segment, parse_segment_file_name
from broker.wire import records

log = logging.getLogger("logferry.storage")

CLEAN_SHUTDOWN_MARKER = ".clean_shutdown"
"""File a log dir holds while no broker has it open since a clean shutdown."""


@dataclass
class LoadedSegments:
    """What :func:`load_segments` found."""

    segments: list[Segment]
    """Segments in offset order; the last one is open for appending."""
    created: bool
    """True if the directory held no segment and segment 0 was created."""
    scanned_messages: int
    """Messages in the batches recovery validated (0 if nothing was scanned)."""
    scanned_bytes: int
    """Bytes of those batches."""


def load_segments(directory: Path, name: str, recover: bool) -> LoadedSegments:
    """Open the segments of partition ``name`` in ``directory``, recovering if asked.

    Raises StorageError (clean open only) when the segments do not line up, because that
    means files were changed behind the broker's back and cutting data needs a human.
    """
    segments = _open_all(directory, name)
    created = not segments
    try:
        if created:
            segments.append(Segment.create(directory, 0))
        _check_contiguous(segments, name, recover)
        messages = nbytes = 0
        if recover:
            messages, nbytes = _recover_tail(segments, name)
        segments[-1].open_for_append()
    except BaseException:
        for segment in segments:
            segment.close()
        raise
    return LoadedSegments(segments, created, messages, nbytes)


def _open_all(directory: Path, name: str) -> list[Segment]:
    found: list[tuple[int, Path]] = []
    with os.scandir(directory) as entries:
        for entry in entries:
            base = parse_segment_file_name(entry.name)
            if base is not None and entry.is_file(follow_symlinks=False):
                found.append((base, Path(entry.path)))
            elif entry.name.endswith(".log"):
                log.warning("%s: ignoring %s: not a segment file name", name, entry.path)
    found.sort()
    segments: list[Segment] = []
    try:
        for base, path in found:
            segments.append(Segment.open(path, base))
    except BaseException:
        for segment in segments:
            segment.close()
        raise
    return segments


def _check_contiguous(segments: list[Segment], name: str, recover: bool) -> None:
    """Make sure each segment ends where the next begins; cut the log at a break."""
    for i in range(len(segments) - 1):
        seg, following = segments[i], segments[i + 1]
        if seg.end_offset == following.base_offset:
            continue
        kind = "gap" if seg.end_offset < following.base_offset else "overlap"
        if not recover:
            raise StorageError(
                f"partition {name}: segment {seg.path} ends at offset {seg.end_offset} but "
                f"the next segment starts at {following.base_offset} (a {kind}), although "
                f"the log was shut down cleanly, so its files were changed outside the "
                f"broker. Restore them, or remove {CLEAN_SHUTDOWN_MARKER} from the log dir "
                f"to let recovery cut this log at offset {seg.base_offset + seg.size}."
            )
        for dropped in segments[i + 1 :]:
            log.warning(
                "recovery of %s: deleted segment %s (%d bytes): it follows a %s "
                "in the offsets after %s, so it was never flushed",
                name,
                dropped.path,
                dropped.size,
                kind,
                seg.path,
            )
            _discard(dropped)
        del segments[i + 1 :]
        return


def _recover_tail(segments: list[Segment], name: str) -> tuple[int, int]:
    """Cut the last segment after its last valid batch; returns (messages, bytes) kept."""
    messages = nbytes = 0
    while True:
        while len(segments) > 1 and segments[-1].size == 0:
            empty = segments.pop()
            log.info("recovery of %s: removed empty trailing segment %s", name, empty.path)
            _discard(empty)
        seg = segments[-1]
        result = _scan_segment(seg)
        messages += result.messages
        nbytes += result.valid_bytes
        if result.error is None:
            return messages, nbytes
        cut = seg.size - result.valid_bytes
        log.warning(
            "recovery of %s: truncated segment %s at byte %d (offset %d), cutting %d bytes: %s",
            name,
            seg.path,
            result.valid_bytes,
            seg.base_offset + result.valid_bytes,
            cut,
            result.error,
        )
        seg.truncate(result.valid_bytes)
        if seg.size or len(segments) == 1:
            return messages, nbytes
        # The cut emptied a segment after another one: check that one's tail too.


def _scan_segment(seg: Segment) -> records.ScanResult:
    """Walk a whole segment file through a read-only mapping (no copy into Python)."""
    if seg.size == 0:
        return records.ScanResult(0, 0, 0, None)
    with mmap.mmap(seg.reader.fileno(), seg.size, access=mmap.ACCESS_READ) as mapped:
        if hasattr(mmap, "MADV_SEQUENTIAL"):
            mapped.madvise(mmap.MADV_SEQUENTIAL)
        return records.scan(mapped)


def _discard(segment: Segment) -> None:
    segment.close()
    with contextlib.suppress(FileNotFoundError):
        os.unlink(segment.path)
