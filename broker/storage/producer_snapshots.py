"""Producer state on disk: snapshots beside the segments, and the rebuild from the log.

A snapshot ``<20-digit offset>.producers`` holds a partition's
:class:`~broker.storage.producer_state.ProducerStateTable` as it was when the log
ended at that offset. The log writes one when it closes and when it rolls a segment,
if it knows any producer;
on load the newest snapshot inside the log is read and the batch headers after it
are walked (:func:`broker.wire.records.walk_producers`: headers only, no payload, no
CRC), which is the state Kafka would rebuild. After a clean stop a log without a
snapshot had no producer state (the stop writes one whenever there is any), so nothing
is walked: a clean start reads no more than before idempotence. After a crash, without
a usable snapshot (a log no idempotent producer wrote, or a damaged file), only the
last :data:`TAIL_SEGMENTS` segment is walked: a producer idle for longer is treated as
new (any sequence accepted) instead of making the start read every retained byte.

Snapshots are written without fsync: one lost in a crash costs a longer walk, never
a wrong answer, because snapshots past the log end (a recovered, shorter log) are
deleted before anything is read.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path

from broker.common.errors import CorruptBatchError
from broker.storage.producer_state import ProducerStateTable
from broker.storage.segment import Segment
from broker.wire import records

log = logging.getLogger("logferry.storage")

SUFFIX = ".producers"
KEEP = 2
"""Snapshots kept per partition (the newest ones)."""
TAIL_SEGMENTS = 1
"""Segments walked when no snapshot can be used (the active one: the roll before it
wrote a snapshot if any producer was known then)."""
_CHUNK = 64 * 1024
"""Bytes read at each header position: small batches are walked a chunk at a time, and
of a large one little more than its header is read."""


def snapshot_name(offset: int) -> str:
    """The file name of the snapshot taken at ``offset``."""
    return f"{offset:020d}{SUFFIX}"


def list_snapshots(directory: Path) -> list[tuple[int, Path]]:
    """``(offset, path)`` of every snapshot in ``directory``, oldest first."""
    found = []
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                stem = entry.name[: -len(SUFFIX)]
                if entry.name.endswith(SUFFIX) and len(stem) == 20 and stem.isdigit():
                    found.append((int(stem), Path(entry.path)))
    except OSError:
        return []
    return sorted(found)


def write_snapshot(directory: Path, table: ProducerStateTable, offset: int) -> None:
    """Write the table as the snapshot at ``offset`` (atomically: temp file, rename) and
    delete all but the newest :data:`KEEP`. A failure is logged, not raised: a missing
    snapshot only makes the next load walk more of the log."""
    path = directory / snapshot_name(offset)
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_bytes(table.to_bytes(offset))
        os.replace(tmp, path)
        for _, old in list_snapshots(directory)[:-KEEP]:
            old.unlink(missing_ok=True)
    except OSError as exc:
        log.warning("%s: could not write producer state snapshot %s: %s", table.name, path, exc)


def drop_snapshots_after(directory: Path, offset: int) -> None:
    """Delete snapshots taken past ``offset`` (the log was cut back there)."""
    for at, path in list_snapshots(directory):
        if at > offset:
            try:
                path.unlink(missing_ok=True)
            except OSError as exc:
                log.warning("could not delete producer state snapshot %s: %s", path, exc)


def load_state(directory: Path, name: str, segments: Sequence[Segment], clean: bool = False) -> ProducerStateTable:
    """The producer state of a log made of ``segments``: the newest snapshot inside the
    log plus a walk of the batch headers after it; ``clean`` (the log was closed
    cleanly): none without a snapshot (see the module docstring)."""
    started = time.monotonic()
    start, end = segments[0].base_offset, segments[-1].end_offset
    drop_snapshots_after(directory, end)
    table = ProducerStateTable(name)
    walk_from = end if clean else segments[max(0, len(segments) - TAIL_SEGMENTS)].base_offset
    for at, path in reversed(list_snapshots(directory)):
        if at < start:
            continue
        try:
            table, walk_from = ProducerStateTable.from_bytes(path.read_bytes(), name)
            break
        except (OSError, ValueError) as exc:
            log.warning("%s: ignoring producer state snapshot %s: %s", name, path, exc)
            table = ProducerStateTable(name)
    walked = walk_segments(table, segments, walk_from)
    table.expire_before(start)
    if table.producers or table.txns:
        log.info(
            "%s: producer state of %d producers rebuilt from offset %d (%d bytes walked) in %.3fs",
            name,
            len(table),
            walk_from,
            walked,
            time.monotonic() - started,
        )
    return table


def walk_segments(table: ProducerStateTable, segments: Sequence[Segment], start: int) -> int:
    """Record every magic 2 batch from ``start`` (a batch boundary) to the log end;
    returns the bytes walked."""
    walked = 0
    for seg in segments:
        if seg.end_offset <= start:
            continue
        pos = max(0, start - seg.base_offset)
        while pos < seg.size:
            chunk = seg.read(pos, min(_CHUNK, seg.size - pos))
            txns: list[records.TxnInfo] = []
            try:
                infos, used = records.walk_producers(chunk, txns)
            except CorruptBatchError as exc:
                log.warning("%s: producer state walk stopped at offset %d: %s", table.name, seg.base_offset + pos, exc)
                return walked
            if used == 0:  # a header cut by the end of the segment (recovery cuts these)
                break
            table.record(infos, seg.base_offset + pos)
            if txns:
                table.record_txns(txns, seg.base_offset + pos)
            walked += min(used, len(chunk))
            pos += used
    return walked


__all__ = ["drop_snapshots_after", "list_snapshots", "load_state", "snapshot_name", "walk_segments", "write_snapshot"]
