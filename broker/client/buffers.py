"""Reused buffers for the producer's encoded batches.

A large batch packed into a fresh buffer costs page faults on every page of it (the
allocator hands freed large blocks back to the kernel), and on this machine those
faults were the larger part of encoding's time. The sender packs large batches into
buffers taken from a :class:`BufferPool`; the accumulator gives a batch's buffer back
when the batch is finished (delivered or failed), when nothing reads it any more:
requests are written to the socket before ``request`` returns.
"""

from __future__ import annotations

import threading
from collections import deque

KEEP_BYTES = 16 << 20
"""Bytes of free buffers a pool keeps by default: a full request's batches (the
producer's ``max_request_bytes`` default). Kept by count (8) instead, a sender that
drained dozens of 256 KiB batches into one request (up to 16 MiB) got a fresh buffer
for 88% of its batches (653 of 741 per million 200-byte messages), each zeroed and
faulted in."""


class BufferPool:
    """Free bytearrays, taken by the sender thread and given back by any thread.

    At most ``keep_bytes`` of buffers of at most ``max_bytes`` each are kept: a pool
    bounded in memory, sized for one request's batches.
    """

    def __init__(self, keep_bytes: int = KEEP_BYTES, max_bytes: int = 4 << 20):
        self.keep_bytes = keep_bytes
        self.max_bytes = max_bytes
        self._free: deque[bytearray] = deque()
        self._kept = 0
        self._lock = threading.Lock()  # the byte count; deque.pop/append are atomic

    def take(self, size: int) -> bytearray:
        """A buffer of at least ``size`` bytes (its contents are garbage)."""
        while True:
            with self._lock:
                try:
                    buf = self._free.pop()
                except IndexError:
                    break
                self._kept -= len(buf)
            if len(buf) >= size:
                return buf
            # too small for this batch: drop it, batches are about this size now
        return bytearray(size + size // 8)  # room for the next, slightly larger batch

    def give(self, buf: bytearray) -> None:
        """Return a buffer nothing reads any more."""
        if len(buf) > self.max_bytes:
            return
        with self._lock:
            if self._kept + len(buf) <= self.keep_bytes:
                self._free.append(buf)
                self._kept += len(buf)

    @property
    def kept_bytes(self) -> int:
        """Bytes of the free buffers held."""
        return self._kept

    def __len__(self) -> int:
        return len(self._free)


__all__ = ["BufferPool", "KEEP_BYTES"]
