"""A broker-wide cap on the bytes of requests being read or handled, sans IO.

Kafka's ``queued.max.request.bytes``: every connection reserves a request's whole
size from one budget as soon as the frame's prefix tells it, before buffering the
rest, and gives it back when the request has been handled. A connection that cannot
reserve stops reading and waits; without this, 16 clients each sending the first part
of a 16 MiB frame made the broker buffer 256 MiB.

The rules, chosen so that small requests of well-behaved clients keep flowing while
big ones wait:

- a reservation succeeds when it fits (``reserved + n <= capacity``), or when nothing
  is reserved at all (so a request larger than the whole budget is still read, alone);
- waiters are granted in arrival order when bytes are released, but one that does not
  fit yet does not block a later one that does (as in Kafka, a big request can wait
  while small ones pass; it is granted once enough is released);
- a request that can be reserved right away is, even while others wait;
- bytes already in memory (a whole request read in one go and handled in the
  background) are counted with :meth:`~RequestBudget.take` even past the capacity, so
  that later reservations wait for them.

Memory held for requests being received thus stays under ``max(capacity, largest
request)``, plus what whole requests in the background hold beyond it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

Grant = Callable[[int], None]
"""Called with the reserved size once a waiter's reservation is made for it."""


class RequestBudget:
    """Bytes reserved for requests across all connections, with waiters."""

    __slots__ = ("capacity", "reserved", "_waiters")

    def __init__(self, capacity: int):
        if capacity <= 0:
            raise ValueError(f"capacity must be positive, not {capacity}")
        self.capacity = capacity
        self.reserved = 0
        self._waiters: deque[tuple[int, Grant]] = deque()

    @property
    def waiting(self) -> int:
        """How many reservations are waiting for bytes to be released."""
        return len(self._waiters)

    def try_reserve(self, nbytes: int) -> bool:
        """Reserve ``nbytes`` now if they fit; False (nothing reserved) if not."""
        reserved = self.reserved
        if reserved + nbytes <= self.capacity or reserved == 0:
            self.reserved = reserved + nbytes
            return True
        return False

    def take(self, nbytes: int) -> None:
        """Count ``nbytes`` that are already in memory (a request that arrived whole
        and is handled in the background), even past the capacity: later
        reservations wait until they are released."""
        self.reserved += nbytes

    def wait(self, nbytes: int, grant: Grant) -> None:
        """Queue a reservation of ``nbytes``; ``grant(nbytes)`` runs once it is made.

        ``grant`` is called from inside :meth:`release` (or at once, if the bytes fit
        now), so it should only record the grant and schedule work.
        """
        if self.try_reserve(nbytes):
            grant(nbytes)
            return
        self._waiters.append((nbytes, grant))

    def cancel(self, grant: Grant) -> bool:
        """Withdraw a waiting reservation (its connection closed); True if it was waiting.

        Compared with ``==``, so a bound method (a new object at each access) matches.
        """
        for item in self._waiters:
            if item[1] == grant:
                self._waiters.remove(item)
                return True
        return False

    def release(self, nbytes: int) -> None:
        """Give back ``nbytes`` reserved earlier and grant the waiters that now fit."""
        if nbytes <= 0:
            return
        self.reserved -= nbytes
        if self.reserved < 0:
            raise AssertionError(f"released more request bytes than were reserved ({self.reserved} left)")
        if self._waiters:
            self._grant_waiters()

    def _grant_waiters(self) -> None:
        granted: list[tuple[int, Grant]] = []
        kept: deque[tuple[int, Grant]] = deque()
        for nbytes, grant in self._waiters:
            if self.try_reserve(nbytes):
                granted.append((nbytes, grant))
            else:
                kept.append((nbytes, grant))
        self._waiters = kept
        for nbytes, grant in granted:
            grant(nbytes)


__all__ = ["Grant", "RequestBudget"]
