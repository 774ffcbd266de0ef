"""A log start inside the first segment, on disk: the file ``log-start`` beside the segments.

Retention moves a partition's start a whole segment at a time, and then the first
segment's base offset *is* the start. Deleting records up to a given message (Kafka's
DeleteRecords, docs/kafka.md) moves it to any message, usually inside a segment: the
segments wholly below it are deleted, and what remains below it in the first segment is
hidden (fetches, ListOffsets earliest, native offsets), as Kafka's ``logStartOffset``
hides it, until retention deletes that segment too.

Such a start (:class:`LogStart`) is the byte offset of the batch that holds the first
kept message, which is the start native clients see (they address batches), that
message's offset, which Kafka clients see, and the message offset of that batch's first
message (what a replica that restarts its log empty there must count from). It is written before any segment goes
(written, fsynced, renamed, the directory fsynced: a crash leaves the old start or the
new one), so the start never moves back after a restart. A file that names no place in
the log as loaded (a damaged file, a log cut shorter) is ignored with a warning: the
log then starts at its first segment again.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from pathlib import Path
from typing import NamedTuple

from broker.storage.segment import fsync_dir

log = logging.getLogger("logferry.storage")

FILE_NAME = "log-start"


class LogStart(NamedTuple):
    """Where a partition starts when that is not its first segment's first byte."""

    offset: int
    """Byte offset of the batch holding the first kept message (a batch boundary)."""
    message: int
    """Message offset of the first kept message (may lie inside that batch)."""
    batch_message: int
    """Message offset of the first message of the batch at :attr:`offset` (<= :attr:`message`)."""


def read_log_start(directory: Path, name: str) -> LogStart | None:
    """The start recorded for the partition in ``directory`` (None: none, or unreadable,
    which is logged)."""
    path = Path(directory) / FILE_NAME
    try:
        data = json.loads(path.read_text())
        start = LogStart(int(data["offset"]), int(data["message"]), int(data["batch_message"]))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, KeyError) as exc:
        log.warning("%s: ignoring unreadable %s (%s): the log starts at its first segment", name, path, exc)
        return None
    if not 0 <= start.batch_message <= start.message or start.offset < 0:
        log.warning("%s: ignoring %s: not a log start %s", name, path, start)
        return None
    return start


def write_log_start(directory: Path, start: LogStart) -> None:
    """Record ``start`` durably (write, fsync, rename, fsync the directory).
    Raises OSError."""
    path = Path(directory) / FILE_NAME
    tmp = path.with_name(FILE_NAME + ".tmp")
    with open(tmp, "w") as f:
        json.dump(start._asdict(), f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def remove_log_start(directory: Path) -> None:
    """Forget the recorded start (the first segment starts the log again). Not fsynced:
    a file that comes back after a crash names a place the log no longer has, or the
    same start, and is ignored or right."""
    with contextlib.suppress(FileNotFoundError):
        (Path(directory) / FILE_NAME).unlink()


__all__ = ["FILE_NAME", "LogStart", "read_log_start", "remove_log_start", "write_log_start"]
