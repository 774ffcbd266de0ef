"""The idempotent producer's identity and sequence numbers (sans IO).

An idempotent producer gets a producer id from the cluster (the init_producer_id
api) and numbers its messages per partition: each batch carries ``(producer_id,
epoch, base_sequence)`` (a magic 2 batch, :mod:`broker.wire.records`), fixed when the
batch is first encoded, so a retry resends the very same bytes and the partition
leader recognises it (:mod:`broker.storage.producer_state`) instead of appending it
twice. Order is kept because a partition has at most one request in flight
(:mod:`broker.client.accumulator`).

When a batch fails for good, the producer no longer knows whether the partition has
it, so the next sequence number there is unknown: :meth:`ProducerSequences.reset`
bumps the epoch and restarts every partition at sequence 0 (the leader accepts a new
epoch from 0), as Kafka's idempotent producer does. An epoch that would overflow, or a
fenced producer, takes a new producer id instead.
"""

from __future__ import annotations

import threading

from broker.wire.records import SEQUENCE_MODULUS

MAX_EPOCH = (1 << 15) - 1


class ProducerSequences:
    """Producer id, epoch and the next sequence number of each partition (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.producer_id: int | None = None
        """None until the cluster gave one (and again after :meth:`forget_id`)."""
        self.epoch = 0
        self._next: dict[tuple[str, int], int] = {}
        self.resets = 0
        """How many times the sequences were restarted (epoch bumps and new ids)."""

    @property
    def needs_id(self) -> bool:
        """True while the producer has no id: ask the cluster before encoding."""
        return self.producer_id is None

    def set_id(self, producer_id: int, epoch: int) -> None:
        """Start over with a new id from the cluster (every partition at sequence 0)."""
        with self._lock:
            self.producer_id = producer_id
            self.epoch = epoch
            self._next.clear()

    def assign(self, tp: tuple[str, int], count: int) -> tuple[int, int, int]:
        """``(producer_id, epoch, base_sequence)`` for the next batch of ``count``
        messages to ``tp``; advances the partition's sequence."""
        with self._lock:
            pid = self.producer_id
            if pid is None:
                raise RuntimeError("assign() before the producer has an id")
            seq = self._next.get(tp, 0)
            self._next[tp] = (seq + count) % SEQUENCE_MODULUS
            return pid, self.epoch, seq

    def reset(self) -> None:
        """A batch failed for good: bump the epoch and restart every partition at 0
        (batches already encoded keep their old epoch and are sent first)."""
        with self._lock:
            self.resets += 1
            self._next.clear()
            if self.epoch >= MAX_EPOCH:
                self.producer_id = None  # the next send asks for a new id
            else:
                self.epoch += 1

    def forget_id(self) -> None:
        """The id was fenced: the next send asks the cluster for a new one."""
        with self._lock:
            self.resets += 1
            self.producer_id = None
            self._next.clear()


__all__ = ["MAX_EPOCH", "ProducerSequences"]
