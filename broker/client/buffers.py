"""Reused buffers for the producer's encoded batches.

A large batch packed into a fresh buffer costs page faults on every page of it (the
allocator hands freed large blocks back to the kernel), and on this machine those
faults were the larger part of encoding's time. The sender packs large batches into
buffers taken from a :class:`BufferPool`; the accumulator gives a batch's buffer back
when the batch is finished (delivered or failed), when nothing reads it any more:
requests are written to the socket before ``request`` returns.
"""

from __future__ import annotations

from collections import deque


class BufferPool:
    """A few bytearrays, taken by the sender thread and given back by any thread.

    ``deque.append`` and ``pop`` are atomic, so no lock is needed. At most ``keep``
    buffers of at most ``max_bytes`` each are kept: a pool bounded in memory, sized for
    the batches in flight at once.
    """

    def __init__(self, keep: int = 8, max_bytes: int = 4 << 20):
        self.keep = keep
        self.max_bytes = max_bytes
        self._free: deque[bytearray] = deque()

    def take(self, size: int) -> bytearray:
        """A buffer of at least ``size`` bytes (its contents are garbage)."""
        while True:
            try:
                buf = self._free.pop()
            except IndexError:
                return bytearray(size + size // 8)  # room for the next, slightly larger batch
            if len(buf) >= size:
                return buf
            # too small for this batch: drop it, batches are about this size now

    def give(self, buf: bytearray) -> None:
        """Return a buffer nothing reads any more."""
        if len(self._free) < self.keep and len(buf) <= self.max_bytes:
            self._free.append(buf)

    def __len__(self) -> int:
        return len(self._free)


__all__ = ["BufferPool"]
