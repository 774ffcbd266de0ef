"""The nemesis tests' workload: an idempotent acks=all producer that records the fate of
every batch it sends, and a reader that consumes while the fault holds.

A :class:`Workload` sends numbered messages (``<partition>:<seq>``, ``seq`` rising per
partition) round-robin over a topic's partitions at a steady rate from a thread of its
own, and records for each batch when it was sent, when its outcome came, and the
outcome: **acked** (the broker acknowledged it: it must never be lost), **failed** (the
producer gave up: it may or may not be stored) or **unknown** (no outcome when the
workload stopped). :mod:`tests.support.checker` judges a run from these records and what
the cluster holds. Start it inside a host of the test network (``with host.inside():
workload.start()``): the producer and its threads live there.

A :class:`Reader` follows every partition from its start, as a real-time consumer does,
from before the fault to after the heal, and keeps what it read in order, so the checker
can tell whether a consumer saw a message that later disappeared (a read above the high
watermark) or saw a partition in another order than it ends up in.

A :class:`GroupMember` is a member of a consumer group (``GroupConsumer``) reading the
topic from before the fault to after the heal, committing its positions every half
second, as an application does: the checker compares what it read, and the positions
the group committed, with what the partitions hold in the end (a committed position
the log no longer has makes the group skip what is written there next).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from broker.client import GroupAdmin, GroupConsumer, LogferryError, Producer, SimpleConsumer, messages_of

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


@dataclass
class Reader:
    """A consumer thread reading every partition of a topic in turn, from its start, for
    as long as it runs (see the module). Errors (a leader cut off, an election under
    way) are counted and the partition is asked again after a short pause, its
    leader looked up anew: it reads through the fault."""

    zk_connect: str
    topic: str
    partitions: int
    reads: dict[int, list[bytes]] = field(default_factory=dict)
    """Per partition, every value read, in the order read."""
    read_at: list[tuple[float, int]] = field(default_factory=list)
    """``(time.monotonic(), messages)`` of each fetch that returned messages."""
    errors: dict[str, int] = field(default_factory=dict)
    """Fetch errors by class name."""
    crashed: BaseException | None = None

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.reads = {p: [] for p in range(self.partitions)}

    def start(self) -> Reader:
        """Start reading (in the calling thread's namespace)."""
        consumer = SimpleConsumer(zk=self.zk_connect, request_timeout=3.0)
        self._thread = threading.Thread(target=self._run, args=(consumer,), name="reader", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
            if self._thread.is_alive():
                raise AssertionError("the reader's thread did not stop within 30 s")
        if self.crashed is not None:
            raise AssertionError(f"the reader's thread died: {self.crashed!r}")

    def read_between(self, start: float, end: float) -> int:
        """Messages read from ``start`` to ``end`` (``time.monotonic()`` readings)."""
        with self._lock:
            return sum(n for t, n in self.read_at if start <= t <= end)

    def _run(self, consumer: SimpleConsumer) -> None:
        try:
            with consumer:
                self._read_until_stopped(consumer)
        except BaseException as exc:  # reported by stop(), not lost in a thread
            self.crashed = exc

    def _read_until_stopped(self, consumer: SimpleConsumer) -> None:
        position: dict[int, int] = {}
        while not self._stop.is_set():
            for p in range(self.partitions):
                try:
                    if p not in position:
                        position[p] = consumer.offsets(self.topic, p).start
                    result = consumer.fetch(self.topic, p, position[p], max_wait_ms=50)
                except LogferryError as exc:
                    with self._lock:
                        self.errors[type(exc).__name__] = self.errors.get(type(exc).__name__, 0) + 1
                    consumer.cluster.forget(self.topic)  # look its leader up again
                    self._stop.wait(0.2)
                    continue
                values = [m.value for batch in result.batches for m in messages_of(self.topic, p, batch)]
                with self._lock:
                    self.reads[p].extend(values)
                    if values:
                        self.read_at.append((time.monotonic(), len(values)))
                position[p] = result.next_offset


@dataclass
class GroupMember:
    """One member of consumer group ``group`` reading ``topic`` in a thread of its own
    (see the module); start it inside a host of the test network."""

    zk_connect: str
    topic: str
    group: str = "nemesis"
    reads: dict[int, list[bytes]] = field(default_factory=dict)
    """Per partition, every value the member was handed, in the order handed."""
    committed: dict[int, tuple[int, int]] = field(default_factory=dict)
    """Per partition, the group's committed ``(offset, skip)`` after :meth:`stop`."""
    crashed: BaseException | None = None

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._consumer: GroupConsumer | None = None

    def start(self) -> GroupMember:
        """Join the group (from the earliest offset) and start reading."""
        self._consumer = GroupConsumer(
            self.group, topics=[self.topic], zk=self.zk_connect, auto_commit_ms=500, request_timeout=3.0
        )
        self._thread = threading.Thread(target=self._run, name="group-member", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop reading, commit what was handed out (processed), leave the group, and
        read the group's committed positions."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
            if self._thread.is_alive():
                raise AssertionError("the group member's thread did not stop within 30 s")
        if self._consumer is not None:
            self._consumer.close(processed=True)
        with GroupAdmin(zk=self.zk_connect) as admin:
            positions = admin.offsets(self.group, [self.topic])
        self.committed = {p: (c.offset, c.skip) for (_topic, p), c in positions.items()}
        if self.crashed is not None:
            raise AssertionError(f"the group member's thread died: {self.crashed!r}")

    def _run(self) -> None:
        assert self._consumer is not None
        try:
            while not self._stop.is_set():
                for message in self._consumer.poll(timeout=0.2):
                    self.reads.setdefault(message.partition, []).append(message.value)
        except BaseException as exc:  # reported by stop(), not lost in a thread
            self.crashed = exc


__all__ = ["CHUNK", "RATE", "Batch", "GroupMember", "Reader", "Workload", "parse", "value"]
