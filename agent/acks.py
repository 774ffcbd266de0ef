"""Sans-IO acknowledgement tracking: which prefix of a file the brokers have.

The agent reads a file in chunks and hands each chunk's messages to the producer in
one ``send`` call; the call returns a completion (a ``DeliveryFuture``). A
:class:`AckTracker` keeps those completions in send order with the file offset each
chunk ends at, and moves the file's *checkpoint* (``acked``) forward only over a
prefix of chunks that all succeeded, so the checkpoint never passes a line the
brokers do not have.

State machine per file::

    add(end)           pending: [c1 c2 c3]          acked unchanged
    poll() c1 ok       pending: [c2 c3]             acked = c1.end
    poll() c2 failed   -> Rewind(acked)             generation += 1; c3 becomes stale
                       the caller re-reads from acked and sends again

Stale chunks (sent before a rewind) are still in the producer. Their outcome no
longer moves the checkpoint (those bytes are sent again), but it still counts: their
bytes are in flight until they finish, and the ones that succeed are in the topic,
which the audit must count. :meth:`poll` therefore reports every finished chunk.

Nothing here touches a clock, a file or a socket; completions are anything with
``done()`` and ``exception()``.
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple, Protocol


class Completion(Protocol):
    """The part of ``broker.client.DeliveryFuture`` the tracker uses."""

    def done(self) -> bool: ...

    def exception(self) -> BaseException | None: ...


class Chunk(NamedTuple):
    """One ``send`` call's worth of a file."""

    completion: Completion
    start: int
    """File offset of the chunk's first byte (the previous chunk's end)."""
    end: int
    """File offset the checkpoint may move to once this chunk and all before it are acked."""
    nbytes: int
    """Encoded bytes handed to the producer (what counts against the in-flight cap)."""
    messages: int
    """Messages in the chunk (not ``count``: that name is tuple's own method)."""
    topic: str
    window: int
    """Audit window (ms since the epoch) of the chunk's time read."""
    sent_at: float = 0.0
    """Monotonic time of the send (for the acknowledgement timeout)."""


class Finished(NamedTuple):
    """A chunk the producer is done with."""

    chunk: Chunk
    ok: bool


class AckTimeoutError(Exception):
    """A chunk's completion did not arrive within the acknowledgement timeout."""

    retriable = True


class Rewind(NamedTuple):
    """Read the file again from ``offset``: a chunk after it failed with ``error``."""

    offset: int
    error: BaseException


class AckTracker:
    """Orders one file's in-flight chunks and derives its checkpoint; see module docstring."""

    __slots__ = ("acked", "generation", "_pending", "_stale")

    def __init__(self, acked: int = 0):
        self.acked = acked
        self.generation = 0
        self._pending: deque[Chunk] = deque()
        self._stale: list[Chunk] = []

    @property
    def in_flight(self) -> int:
        """Chunks handed to the producer and not finished (current and stale)."""
        return len(self._pending) + len(self._stale)

    def pending_chunks(self) -> list[Chunk]:
        """Unfinished chunks, stale first (for accounting and tests)."""
        return self._stale + list(self._pending)

    def add(self, chunk: Chunk) -> None:
        """Record a chunk just handed to the producer (in file order)."""
        if self._pending and chunk.start < self._pending[-1].end:
            raise ValueError(f"chunk starts at {chunk.start}, before the previous end {self._pending[-1].end}")
        self._pending.append(chunk)

    def restart(self, offset: int) -> None:
        """The file is read again from ``offset`` (truncation, or a send that raised).

        Chunks in flight become stale. ``acked`` moves to ``offset`` when it lies
        before it: a truncated file's old checkpoint means nothing for its new bytes.
        """
        self._stale.extend(self._pending)
        self._pending.clear()
        self.generation += 1
        if offset < self.acked:
            self.acked = offset

    def oldest_sent(self) -> float | None:
        """Send time of the oldest unfinished chunk, or None."""
        times = [c.sent_at for c in self._stale]
        if self._pending:
            times.append(self._pending[0].sent_at)
        return min(times) if times else None

    def poll(self, expire_before: float | None = None) -> tuple[list[Finished], Rewind | None]:
        """Collect finished chunks; advance ``acked``; say whether to re-read.

        Returns every chunk that finished (for in-flight and audit accounting) and a
        :class:`Rewind` when the oldest unacknowledged chunk failed. With
        ``expire_before``, a chunk sent before that time and still unfinished counts as
        failed (:class:`AckTimeoutError`): a completion that never comes must not stall
        the file or pin its bytes in flight forever.
        """
        finished: list[Finished] = []
        if self._stale:
            still: list[Chunk] = []
            for chunk in self._stale:
                if chunk.completion.done():
                    finished.append(Finished(chunk, chunk.completion.exception() is None))
                elif expire_before is not None and chunk.sent_at < expire_before:
                    finished.append(Finished(chunk, False))
                else:
                    still.append(chunk)
            self._stale = still
        pending = self._pending
        rewind: Rewind | None = None
        while pending:
            head = pending[0]
            if head.completion.done():
                error = head.completion.exception()
            elif expire_before is not None and head.sent_at < expire_before:
                error = AckTimeoutError(f"no acknowledgement for offsets {head.start}-{head.end}")
            else:
                break
            chunk = pending.popleft()
            finished.append(Finished(chunk, error is None))
            if error is None:
                if chunk.end > self.acked:
                    self.acked = chunk.end
                continue
            rewind = Rewind(self.acked, error)
            self.restart(self.acked)
            # The chunks just made stale may be done already: report them now.
            more, _ = self.poll(expire_before)
            finished.extend(more)
            break
        return finished, rewind
