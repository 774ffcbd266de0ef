"""Group commit: the sans-IO bookkeeping of "one fsync at a time, covering everything
appended meanwhile".

One :class:`CommitQueue` per log dir. An append adds its partition; if no commit round
is running, the caller starts one at once. A round takes every partition added so far
and fsyncs them together; partitions added while it runs wait for the next round, which
starts as soon as this one ends. So an idle broker syncs right after each append
(latency of one fsync), and a busy one syncs back to back, each round covering more
appends (the fsync rate follows the disk, not the message rate: no timer, no per-message
work). No I/O here: :class:`broker.server.flusher.Flusher` drives it.
"""

from __future__ import annotations

from typing import Generic, Hashable, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class CommitQueue(Generic[K, V]):
    """Which partitions the next commit round covers, and whether a round is running."""

    __slots__ = ("_pending", "running", "rounds")

    def __init__(self) -> None:
        self._pending: dict[K, V] = {}
        self.running = False
        """True from :meth:`add` returning True until :meth:`round_done` returns False."""
        self.rounds = 0
        """Rounds taken so far (for tests and metrics)."""

    def add(self, key: K, item: V) -> bool:
        """``key`` has bytes to make durable. True: no round is running, the caller must
        start one now (call :meth:`take`); False: a running round's successor covers it."""
        self._pending[key] = item
        if self.running:
            return False
        self.running = True
        return True

    def take(self) -> dict[K, V]:
        """Start a round: everything added so far, in the order first added."""
        batch, self._pending = self._pending, {}
        self.rounds += 1
        return batch

    def round_done(self) -> bool:
        """The round ended. True: more was added meanwhile, start the next round now
        (call :meth:`take`); False: the queue is idle until the next :meth:`add`."""
        if self._pending:
            return True
        self.running = False
        return False

    def __contains__(self, key: object) -> bool:
        return key in self._pending

    def __len__(self) -> int:
        return len(self._pending)


__all__ = ["CommitQueue"]
