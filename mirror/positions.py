"""Where each partition's copy stands in the offset-preserving mode (sans IO).

In this mode the target partition is a byte-identical copy of the source partition,
and its log end *is* the mirror's position: the next source batch to copy is the one
at the target's end. Per partition the copy is in one of three states:

* ``resync``: the position is unknown (just assigned, or an append failed); the copy
  loop asks the target leader where its log ends, checks that the target's last batch
  is the source's, moves the source fetch there and calls :meth:`Positions.resynced`.
* ``copying``: batches at exactly ``next`` are sent (pipelined, in order), each as an
  append at its source offset; anything else the consumer hands out is stale (from
  before a seek) and dropped.
* ``halted``: the target diverged; nothing more is copied (never spliced).

Each resync starts a new generation; the outcomes of appends sent in an older one are
ignored (they failed, or they landed and the target's end already says so). Any
failed append sends its partition back to ``resync``: a lost answer costs one query,
never a second copy.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

TopicPartition = tuple[str, int]

RESYNC, COPYING, HALTED, REFUSED = "resync", "copying", "halted", "refused"


@dataclass
class Sent:
    """One batch on its way to the target."""

    offset: int
    next_offset: int
    messages: int
    nbytes: int


@dataclass
class PartitionCopy:
    """The copy of one source partition."""

    state: str = RESYNC
    next: int = -1
    """Offset of the next batch to send (copying)."""
    generation: int = 0
    start_at_expect: bool = False
    """The first append of this generation may start an empty target log at its offset."""
    sent: deque[Sent] = field(default_factory=deque)
    reason: str = ""
    """Why it halted."""


@dataclass
class Acked:
    """What :meth:`Positions.outcome` learned from a successful append."""

    position: int
    """The source (and target) offset now copied up to."""
    done: Sent


class Positions:
    """Every owned partition's :class:`PartitionCopy`; owned by the copy loop."""

    def __init__(self) -> None:
        self.parts: dict[TopicPartition, PartitionCopy] = {}
        self.inflight_bytes = 0

    def state(self, tp: TopicPartition) -> str:
        """The partition's state (``resync`` for one never seen)."""
        part = self.parts.get(tp)
        return RESYNC if part is None else part.state

    def needs_resync(self) -> list[TopicPartition]:
        """Known partitions whose position must be learned from the target."""
        return [tp for tp, p in self.parts.items() if p.state == RESYNC]

    def track(self, tp: TopicPartition) -> None:
        """A newly owned partition: its position is unknown."""
        self.parts.setdefault(tp, PartitionCopy())

    def forget(self, tp: TopicPartition) -> None:
        """The partition was revoked (its in-flight appends no longer matter)."""
        part = self.parts.pop(tp, None)
        if part is not None:
            self._drop_sent(part)

    def resynced(self, tp: TopicPartition, position: int, start_at_expect: bool = False) -> None:
        """The target ends at ``position`` (checked against the source): copy from there."""
        part = self.parts.setdefault(tp, PartitionCopy())
        if part.state == HALTED:
            return
        self._drop_sent(part)
        part.state, part.next, part.start_at_expect = COPYING, position, start_at_expect
        part.generation += 1

    def halt(self, tp: TopicPartition, reason: str) -> None:
        """The target diverged: stop the partition for good (until a restart)."""
        part = self.parts.setdefault(tp, PartitionCopy())
        self._drop_sent(part)
        part.state, part.reason = HALTED, reason
        part.generation += 1

    def refuse(self, tp: TopicPartition) -> None:
        """The target refused the partition's topic (an ACL): stop it until :meth:`retry`."""
        part = self.parts.setdefault(tp, PartitionCopy())
        if part.state == HALTED:
            return
        self._drop_sent(part)
        part.state = REFUSED
        part.generation += 1

    def retry(self, tp: TopicPartition) -> None:
        """Try a refused partition again: learn the target's end first."""
        part = self.parts.get(tp)
        if part is not None and part.state == REFUSED:
            part.state = RESYNC

    def accept(
        self, tp: TopicPartition, offset: int, next_offset: int, messages: int, nbytes: int
    ) -> tuple[int, bool] | None:
        """A polled batch: ``(generation, start flag)`` if it is to be sent now, None if
        it is stale or the partition is not copying."""
        part = self.parts.get(tp)
        if part is None or part.state != COPYING or offset != part.next:
            return None
        part.next = next_offset
        part.sent.append(Sent(offset, next_offset, messages, nbytes))
        self.inflight_bytes += nbytes
        start, part.start_at_expect = part.start_at_expect, False
        return part.generation, start

    def outcome(self, tp: TopicPartition, generation: int, offset: int, ok: bool) -> Acked | None:
        """The target's answer to the append of the batch at ``offset``.

        Success: the batch is copied (returned; appends of a partition land in order).
        Failure: the partition goes back to ``resync``. Either is ignored when it
        belongs to an older generation or a forgotten partition.
        """
        part = self.parts.get(tp)
        if part is None or generation != part.generation or part.state != COPYING:
            return None
        if ok and part.sent and part.sent[0].offset == offset:
            done = part.sent.popleft()
            self.inflight_bytes -= done.nbytes
            return Acked(done.next_offset, done)
        # a failure, or a success out of order (cannot happen on one connection): learn
        # the truth from the target
        self._drop_sent(part)
        part.state = RESYNC
        part.generation += 1
        return None

    def _drop_sent(self, part: PartitionCopy) -> None:
        self.inflight_bytes -= sum(s.nbytes for s in part.sent)
        part.sent.clear()

    def __len__(self) -> int:
        """Batches in flight."""
        return sum(len(p.sent) for p in self.parts.values())


__all__ = ["COPYING", "HALTED", "REFUSED", "RESYNC", "Acked", "PartitionCopy", "Positions", "Sent"]
