"""Reused buffers for the producer's encoded batches.

A large batch packed into a fresh buffer costs page faults on every page of it (the
allocator hands freed large blocks back to the kernel), and on this machine those
faults were the larger part of encoding's time. The sender packs large batches into
buffers taken from a :class:`BufferPool`; the accumulator gives a batch's buffer back
when the batch is finished (delivered or failed), when nothing reads it any more:
requests are written to the socket before ``request`` returns.

The batches one broker gets from one drain are packed back to back into one
:class:`Arena`, behind :data:`HEAD_ROOM` bytes left free. A request made of such
batches lies in one piece, and a TLS connection encrypts it where it lies, its head
written into the room in front (``Connection.request``'s ``span``): otherwise every
batch was first copied into a staging buffer, which perf put at 11% of a TLS
producer's CPU.
"""

from __future__ import annotations

import threading
from collections import deque

KEEP_BYTES = 16 << 20
"""Bytes of free buffers a pool keeps unless told (the producer keeps two requests'
worth: an arena holds up to a request and its slack). Kept by count (8) instead, a
sender that drained 16 batches of 256 KiB into one 4 MiB request got a fresh buffer
for 88% of its batches (653 of 741 per million 200-byte messages), each zeroed and
faulted in; so does an arena larger than what the pool may keep."""

HEAD_ROOM = 16 * 1024
"""Free bytes in front of an arena's first batch, for the head of the request that
begins with it (a produce head names each partition: about 30 bytes apiece)."""


class BufferPool:
    """Free bytearrays, taken by the sender thread and given back by any thread.

    At most ``keep_bytes`` of buffers of at most ``max_bytes`` each (default: as much
    as ``keep_bytes``) are kept: a pool bounded in memory, sized for the batches of a
    request or two.
    """

    def __init__(self, keep_bytes: int = KEEP_BYTES, max_bytes: int | None = None):
        self.keep_bytes = keep_bytes
        self.max_bytes = keep_bytes if max_bytes is None else max_bytes
        self._free: deque[bytearray] = deque()
        self._kept = 0
        self._lock = threading.Lock()  # the byte count and every arena's counts

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

    def writer(self, estimate: int) -> "ArenaWriter":
        """Consecutive room for about ``estimate`` bytes of batches (see :class:`ArenaWriter`)."""
        return ArenaWriter(self, estimate)

    @property
    def kept_bytes(self) -> int:
        """Bytes of the free buffers held."""
        return self._kept

    def __len__(self) -> int:
        return len(self._free)


class Arena:
    """One pooled buffer that batches are packed into one after another.

    It goes back to its pool once it is no longer being filled and every batch in it
    has been released (finished, or copied out for a retry).
    """

    __slots__ = ("pool", "view", "used", "users", "filling")

    def __init__(self, pool: BufferPool, buffer: bytearray):
        self.pool = pool
        self.view: memoryview | None = memoryview(buffer)
        """The whole buffer; None once given back."""
        self.used = HEAD_ROOM
        self.users = 0
        self.filling = True

    def take(self, size: int) -> int | None:
        """Reserve the next ``size`` bytes for a batch; their offset, or None if they
        do not fit."""
        assert self.view is not None and self.filling
        start = self.used
        if start + size > len(self.view):
            return None
        with self.pool._lock:
            self.users += 1
        self.used = start + size
        return start

    def release(self) -> None:
        """A batch packed here is finished: nothing reads its bytes any more."""
        with self.pool._lock:
            self.users -= 1
            last = self.users == 0 and not self.filling
        if last:
            self._give_back()

    def close(self) -> None:
        """No more batches go in."""
        with self.pool._lock:
            self.filling = False
            last = self.users == 0
        if last:
            self._give_back()

    def _give_back(self) -> None:
        view, self.view = self.view, None
        assert view is not None
        buffer = view.obj
        view.release()
        self.pool.give(buffer)  # type: ignore[arg-type]  # a bytearray


class ArenaWriter:
    """Hands one drain's batches for one broker consecutive pieces of an arena.

    ``take`` is the ``buffer_for`` of :func:`broker.wire.records.encode_batch_deltas`;
    afterwards ``last`` names the arena and offset of the piece it gave. A batch that
    does not fit (the estimate was short) starts another arena. :meth:`close` when
    done: an arena whose batches are all finished goes back to the pool then.
    """

    def __init__(self, pool: BufferPool, estimate: int):
        self.pool = pool
        self._left = estimate
        self._arena: Arena | None = None
        self.last: tuple[Arena, int] | None = None

    def take(self, size: int) -> memoryview:
        """``size`` bytes right after the previous batch's (in a new arena if they do
        not fit)."""
        arena = self._arena
        start = arena.take(size) if arena is not None else None
        if arena is None or start is None:
            if arena is not None:
                arena.close()
            arena = self._arena = Arena(self.pool, self.pool.take(HEAD_ROOM + max(size, self._left)))
            start = arena.take(size)
            assert start is not None
        self._left = max(self._left - size, 0)
        self.last = (arena, start)
        assert arena.view is not None
        return arena.view[start:start + size]

    def close(self) -> None:
        if self._arena is not None:
            self._arena.close()
            self._arena = None

    def __enter__(self) -> "ArenaWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["Arena", "ArenaWriter", "BufferPool", "HEAD_ROOM", "KEEP_BYTES"]
