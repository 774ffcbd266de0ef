"""Making a commit round durable: an fsync per file, or one syncfs(2) for many files.

A group-commit round (:mod:`broker.server.durability.flusher`) covers every partition of one log
dir appended to since the previous round. With many partitions, one fsync per segment
file costs one journal commit each and, in Python, one GIL hand-off each (the event
loop is made to give up the GIL every time the worker's fsync returns): measured here,
100 files took 25 ms per round sequentially against 3.5 ms for one ``syncfs``, and
producing to 100 partitions at once slowed by a third. ``syncfs`` syncs the log dir's
whole file system in one call: every file and directory of the round, one journal
commit, one GIL release.

Since Linux 5.8, ``syncfs`` reports a writeback error of any file of the file system
that happened since the descriptor was opened, so a failed write is seen as ``fsync``
would see it; older kernels return 0 regardless, so it is not used there. It also
writes other programs' dirty data on the same file system, which costs nothing extra
on a dedicated log disk (as deployments have); a round of one file (one busy
partition) fsyncs just that file.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from broker.storage.partition_log import PendingFlush

SYNCFS_MIN_FILES = 2
"""Rounds with fewer files (segments plus directories) fsync each file. From two files
on, one syncfs: each fsync that returns makes the worker take the GIL back from the
busy event loop, and with six partitions per broker (replication_throughput.py, three
brokers) an fsync per file halved the acks="all" rate, where one syncfs per round kept
it at the timer policy's."""


def _find_syncfs() -> Callable[[int], int] | None:
    """libc's syncfs where it reports errors (Linux >= 5.8), else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        major, minor = (int(x) for x in platform.release().split(".")[:2])
        if (major, minor) < (5, 8):
            return None
        fn = ctypes.CDLL(None, use_errno=True).syncfs
    except (ValueError, OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


SYNCFS = _find_syncfs()


def sync_round(
    pendings: Sequence[PendingFlush], fs_fd: int | None = None, syncfs: Callable[[int], int] | None = SYNCFS
) -> list[OSError | None]:
    """Make every captured flush durable (blocking: call it in a worker thread); the
    outcome of each, None for success. One failed fsync does not stop the others.

    ``fs_fd``: a descriptor on the flushes' file system, opened before their bytes
    were written (``syncfs`` reports the errors since its descriptor was opened):
    one ``syncfs`` on it covers them all (they were prepared with ``whole_fs``).
    Without it (or without ``syncfs``), each flush fsyncs its own files."""
    if fs_fd is None or syncfs is None:
        outcomes: list[OSError | None] = []
        for pending in pendings:
            try:
                pending.run()
                outcomes.append(None)
            except OSError as exc:
                outcomes.append(exc)
        return outcomes
    error: OSError | None = None
    if syncfs(fs_fd) != 0:
        code = ctypes.get_errno()
        error = OSError(code, f"syncfs: {os.strerror(code)}")
    return [pending.settle(error) for pending in pendings]


def open_fs_fd(directory: Path) -> int:
    """A descriptor for :func:`sync_round`'s ``fs_fd``: the directory, read-only."""
    return os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))


__all__ = ["SYNCFS", "SYNCFS_MIN_FILES", "open_fs_fd", "sync_round"]
