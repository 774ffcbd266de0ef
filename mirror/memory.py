"""Keep the mirror's large receive buffers for reuse instead of mapping them afresh.

Across a WAN the fetch window asks 15-30 MiB per answer, and the client receives each
answer into one buffer of that size. glibc serves such sizes with a fresh ``mmap`` (or
returns them to the system once freed, past its trim threshold), so every answer paid
for page faults and zeroing again: receiving 16-24 MiB answers, with the fetched-ahead
queue holding a few of them, cost 0.31-0.36 CPU s per GB in a reader thread against
0.15 for 4 MiB ones, 0.7 past 32 MiB. With the thresholds below, freed buffers stay in
the heap and are reused: 0.19-0.23 CPU s per GB for 16-33 MiB answers. The process's
resident memory then stays near its high-water mark, which the mirror's memory bound
(docs/mirror.md, "Across a WAN") already limits.

Only glibc has ``mallopt``; elsewhere this does nothing.
"""

from __future__ import annotations

import ctypes
import logging

log = logging.getLogger("logferry.mirror")

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
"""glibc's ``mallopt`` parameter numbers (malloc.h)."""
MMAP_THRESHOLD = 64 * 1024 * 1024
"""Allocations below this come from the heap (every fetch answer: at most 30 MiB)."""
TRIM_THRESHOLD = 512 * 1024 * 1024
"""Freed heap memory kept for reuse up to this much (above the mirror's memory bound)."""


def keep_receive_buffers() -> bool:
    """Tell glibc to serve and keep large buffers from the heap; True if it accepted."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False  # not glibc
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    accepted = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    if not accepted:
        log.debug("mirror: the allocator refused the buffer thresholds")
    return accepted


__all__ = ["keep_receive_buffers"]
