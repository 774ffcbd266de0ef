"""Which source positions the mirror may commit while many batches are in flight.

The mirror sends batches to the target without waiting for the previous ones (the
copy is pipelined) and learns of their acknowledgements in any order: different
target partitions live on different brokers, and one source batch may become several
target batches (the re-hash fallback). A source position may still only be committed
once the target holds everything before it. So, per source partition, batches are
kept in log order and the committable position is the end of the longest run of
acknowledged batches from the oldest one:

    sent      [0,100) [100,200) [200,300)
    acked               yes       yes       -> nothing committable yet
    acked      yes                          -> 300 committable

A failed batch is a gap: nothing after it is committable until it is sent again
(:meth:`CommitTracker.retry`) and acknowledged. No IO and no threads here: the
mirror's copy loop owns one tracker and feeds it the outcomes.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from broker.common.errors import LogferryError

TopicPartition = tuple[str, int]

PENDING, ACKED, FAILED = "pending", "acked", "failed"


@dataclass
class InFlight:
    """One source batch on its way to the target."""

    tp: TopicPartition
    offset: int
    next_offset: int
    messages: int
    nbytes: int
    sends: int
    """Target batches it became (more than 1 only when re-hashed)."""
    acked: int = 0
    state: str = PENDING
    error: LogferryError | None = None


@dataclass
class Advanced:
    """What :meth:`CommitTracker.advance` found newly safe."""

    positions: dict[TopicPartition, int] = field(default_factory=dict)
    """Source partition -> offset after its last batch the target holds (with all before it)."""
    done: list[InFlight] = field(default_factory=list)
    """The batches behind those positions, in order per partition (for the metrics)."""


class CommitTracker:
    """In-flight source batches per partition, in log order; see the module docstring."""

    def __init__(self) -> None:
        self._batches: dict[int, InFlight] = {}
        self._queues: dict[TopicPartition, deque[int]] = {}
        self._next_id = 0
        self._dirty: set[TopicPartition] = set()
        self.inflight_bytes = 0
        """Stored bytes of the batches sent and not yet released by :meth:`advance`."""

    def __len__(self) -> int:
        """Batches in flight (sent, not yet released by :meth:`advance`)."""
        return len(self._batches)

    def add(
        self, tp: TopicPartition, offset: int, next_offset: int, messages: int = 0, nbytes: int = 0, sends: int = 1
    ) -> int:
        """Record a source batch handed to the producer as ``sends`` target batches; its id.

        Batches of one partition must be added in log order (the consumer hands them so).
        """
        if sends < 1:
            raise ValueError("a batch is sent as at least one target batch")
        batch_id = self._next_id
        self._next_id += 1
        self._batches[batch_id] = InFlight(tp, offset, next_offset, messages, nbytes, sends)
        self._queues.setdefault(tp, deque()).append(batch_id)
        self.inflight_bytes += nbytes
        return batch_id

    def acked(self, batch_id: int) -> None:
        """One target batch of ``batch_id`` was acknowledged."""
        batch = self._batches.get(batch_id)
        if batch is None or batch.state != PENDING:
            return
        batch.acked += 1
        if batch.acked >= batch.sends:
            batch.state = ACKED
            self._dirty.add(batch.tp)

    def failed(self, batch_id: int, error: LogferryError) -> None:
        """A target batch of ``batch_id`` failed for good: a gap nothing may be committed past."""
        batch = self._batches.get(batch_id)
        if batch is None or batch.state == ACKED:
            return
        batch.state = FAILED
        batch.error = error

    def retry(self, batch_id: int, sends: int = 1) -> InFlight:
        """The failed batch is sent again (as ``sends`` target batches); returns it."""
        batch = self._batches[batch_id]
        if batch.state != FAILED:
            raise ValueError(f"batch {batch_id} is {batch.state}, not failed")
        batch.state, batch.error, batch.acked, batch.sends = PENDING, None, 0, sends
        return batch

    def discard_from(self, batch_id: int) -> InFlight | None:
        """Forget ``batch_id`` and every later batch of its partition (to be copied again
        from the returned batch's offset: its topic was refused); None if unknown.
        Their outcomes, should any still arrive, are ignored."""
        first = self._batches.get(batch_id)
        if first is None:
            return None
        queue = self._queues[first.tp]
        while queue and queue[-1] != batch_id:
            self.inflight_bytes -= self._batches.pop(queue.pop()).nbytes
        queue.pop()
        self.inflight_bytes -= self._batches.pop(batch_id).nbytes
        if not queue:
            del self._queues[first.tp]
        return first

    def failures(self) -> list[tuple[int, InFlight]]:
        """Failed batches (id, batch), oldest first per partition."""
        return [(i, b) for i, b in self._batches.items() if b.state == FAILED]

    def advance(self) -> Advanced:
        """Release the acknowledged run at the head of every partition; the new positions."""
        out = Advanced()
        for tp in self._dirty:
            queue = self._queues.get(tp)
            while queue:
                batch = self._batches[queue[0]]
                if batch.state != ACKED:
                    break
                del self._batches[queue.popleft()]
                self.inflight_bytes -= batch.nbytes
                out.positions[tp] = batch.next_offset
                out.done.append(batch)
            if queue is not None and not queue:
                del self._queues[tp]
        self._dirty.clear()
        return out

    def pending(self, tp: TopicPartition) -> list[InFlight]:
        """The partition's batches still in flight, in log order."""
        return [self._batches[i] for i in self._queues.get(tp, ())]


__all__ = ["Advanced", "CommitTracker", "InFlight"]
