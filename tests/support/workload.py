"""The nemesis tests' workload: an idempotent acks=all producer that records the fate of
every batch it sends.

A :class:`Workload` sends numbered messages (``<partition>:<seq>``, ``seq`` rising per
partition) round-robin over a topic's partitions at a steady rate from a thread of its
own, and records for each batch when it was sent, when its outcome came, and the
outcome: **acked** (the broker acknowledged it: it must never be lost), **failed** (the
producer gave up: it may or may not be stored) or **unknown** (no outcome when the
workload stopped). :mod:`tests.support.checker` judges a run from these records and what
the cluster holds. Start it inside a host of the test network (``with host.inside():
workload.start()``): the producer and its threads live there.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from broker.client import Producer

RATE = 1_000
"""Messages per second, over all partitions (the issue's runs used about 1,500)."""
CHUNK = 10
"""Messages per batch (one ``send``)."""
MAX_PENDING = 2_000
"""Batches without an outcome before the workload pauses sending (bounds its memory)."""


@dataclass
class Batch:
    """One ``send`` of the workload and what became of it."""

    partition: int
    seqs: range
    """The sequence numbers of its messages (their values are ``value(partition, seq)``)."""
    sent_at: float
    done_at: float | None = None
    """``time.monotonic()`` when its outcome came (None: none yet)."""
    outcome: str = "unknown"
    """``acked``, ``failed`` or ``unknown``."""
    error: str = ""


def value(partition: int, seq: int) -> bytes:
    """The value of message ``seq`` of ``partition``."""
    return b"%d:%09d" % (partition, seq)


def parse(raw: bytes) -> tuple[int, int]:
    """``(partition, seq)`` of a workload value."""
    partition, seq = raw.split(b":")
    return int(partition), int(seq)


@dataclass
class Workload:
    """A producer thread with acks=all and idempotence; see the module."""

    zk_connect: str
    topic: str
    partitions: int
    rate: int = RATE
    producer_options: dict[str, Any] = field(default_factory=dict)
    batches: list[Batch] = field(default_factory=list)
    crashed: BaseException | None = None

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._producer: Producer | None = None
        self._pending = 0
        """Batches sent without an outcome yet."""

    def start(self) -> Workload:
        """Create the producer and start sending (in the calling thread's namespace)."""
        options = {"acks": "all", "idempotence": True, "linger_ms": 2, "delivery_timeout": 120.0}
        self._producer = Producer(zk=self.zk_connect, **{**options, **self.producer_options})
        self._thread = threading.Thread(target=self._run, name="workload", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 120.0) -> None:
        """Stop sending, wait (bounded) for the outcomes of what was sent, close."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        if self._producer is not None:
            try:
                self._producer.flush(timeout)
            finally:
                self._producer.close()
        if self.crashed is not None:
            raise AssertionError(f"the workload's thread died: {self.crashed!r}")

    def acked_count(self) -> int:
        with self._lock:
            return sum(len(b.seqs) for b in self.batches if b.outcome == "acked")

    def last_ack(self, partition: int) -> float | None:
        """When ``partition`` last had a batch acknowledged."""
        with self._lock:
            times = [b.done_at for b in self.batches if b.partition == partition and b.outcome == "acked"]
        return max((t for t in times if t is not None), default=None)

    def _run(self) -> None:
        try:
            self._send_until_stopped()
        except BaseException as exc:  # reported by stop(), not lost in a thread
            self.crashed = exc

    def _send_until_stopped(self) -> None:
        assert self._producer is not None
        interval = CHUNK / self.rate
        next_seq = [0] * self.partitions
        turn = 0
        began = time.monotonic()
        while not self._stop.is_set():
            if self._pending >= MAX_PENDING:
                self._stop.wait(0.05)
                continue
            p = turn % self.partitions
            seqs = range(next_seq[p], next_seq[p] + CHUNK)
            next_seq[p] += CHUNK
            batch = Batch(p, seqs, time.monotonic())
            with self._lock:
                self.batches.append(batch)
                self._pending += 1
            future = self._producer.send(self.topic, [value(p, s) for s in seqs], partition=p)
            future.add_callback(lambda f, b=batch: self._done(b, f))
            turn += 1
            self._stop.wait(max(0.0, began + turn * interval - time.monotonic()))

    def _done(self, batch: Batch, future: Any) -> None:
        error = future.exception()
        with self._lock:
            self._pending -= 1
            batch.done_at = time.monotonic()
            batch.outcome = "acked" if error is None else "failed"
            batch.error = "" if error is None else f"{type(error).__name__}: {error}"


__all__ = ["CHUNK", "RATE", "Batch", "Workload", "parse", "value"]
