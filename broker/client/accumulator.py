"""The producer's accumulator: open batches per partition, waiting for the sender.

``Producer.send`` appends values to the newest batch of a partition's queue and
returns at once; the sender thread takes ready batches (:meth:`Accumulator.next_ready`)
and hands back the outcome: :meth:`~Accumulator.done`, :meth:`~Accumulator.retry` or
:meth:`~Accumulator.fail`. Everything here is guarded by one lock, never held across
network calls, and nothing here does IO, so it is tested with a fake clock
(``tests/unit/test_producer_accumulator.py``).

Rules the producer's promises rest on:

- **Order.** A partition has at most one request in flight (``in flight``): its next
  batches are not handed out until the outcome of the previous ones is known, and a
  retried batch goes back to the front of its queue. So retries never reorder a
  partition's messages.
- **Readiness.** A partition's oldest batch is ready when it is full (``batch_messages``
  or ``batch_bytes``), older than ``linger``, already encoded (raw or retried), followed
  by another batch, or when the producer flushes or closes; a partition backing off
  after a failure (``retry`` with a time) is not ready before that time.
- **Memory bound.** Queued bytes are bounded by ``buffer_bytes``: ``append`` blocks up
  to ``block_timeout`` for space (then BufferFullError). A single append larger than
  the whole buffer is let through when nothing else is buffered, so it cannot wait forever.
- **Failure.** When a batch fails for good, every later batch of its partition fails
  with it: a success must imply that every earlier send to the partition succeeded.
- **Direct sends.** With ``linger`` 0 and a :attr:`Accumulator.direct` sender set, an
  append that finds the sender thread waiting and nothing in flight takes the ready
  batches itself (marked in flight as the sender's are) and hands them to ``direct``
  in the calling thread, after the lock is released: the message goes to the socket
  without a thread hand-off (40-300 us). The rules above hold unchanged; whenever a
  request is in flight, or the producer flushes, closes or backs off, the sender
  thread sends as before.

The fast path (:func:`fast_send`, one keyless message into an open batch)
checks one number per message: the open batch's ``room``, bytes set aside for it in the
buffer (a *grant*) and below ``batch_bytes``. Grants are counted in the buffer as if
used, so the bound holds without a per-message buffer check; a grant's unused bytes
are given back (*settled*) whenever the batch stops being open or the general path
touches it, and all of them at once before anything waits for buffer space, so
``buffer_bytes`` binds exactly as before. Grants are given only while the buffer is
less than three quarters full (counting grants), at most a sixteenth of it each.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from itertools import chain, repeat
from operator import attrgetter
from typing import Any, Protocol

from broker.client.buffers import BufferPool
from broker.client.delivery import DeliveryFuture
from broker.common.errors import BufferFullError, ProducerClosedError, RequestTimedOutError
from broker.wire import records

TopicPartition = tuple[str, int]
Drained = dict[TopicPartition, list["ProducerBatch"]]


class ProducerBatch:
    """Messages of one partition waiting to be sent, as columns (or one encoded batch).

    Timestamps are kept as runs of equal milliseconds, ``ts_runs`` = [index of the run's
    first message, its milliseconds, ...]: at a million messages a second a batch holds
    a few runs, not thousands of ints, and the deltas are built in C when it is encoded.
    ``ts_start <= t < ts_end`` (epoch seconds) is the millisecond of the last run, so
    the producer's fast path stamps a message with one float comparison.
    """

    __slots__ = (
        "values",
        "keys",
        "ts_runs",
        "ts_start",
        "ts_end",
        "nbytes",
        "created",
        "future",
        "encoded",
        "buffer",
        "raw",
        "count",
        "room",
        "granted",
    )

    def __init__(self, now: float):
        self.values: list[bytes] = []
        self.keys: list[bytes | None] | None = None
        self.ts_runs: list[int] = []
        self.ts_start = 0.0
        self.ts_end = 0.0
        self.nbytes = 0
        """Value bytes (or stored bytes of a raw batch): what the buffer bound counts.
        While the batch is open, bytes the fast path added since its grant are not in it
        yet: they are ``granted - room`` (see :meth:`Accumulator._settle`)."""
        self.room = 0
        """Bytes the fast path (:func:`fast_send`) may still add without another check."""
        self.granted = 0
        """The grant ``room`` counts down from (0: none)."""
        self.created = now
        """Monotonic time of creation: linger and delivery timeout count from it."""
        self.future = DeliveryFuture()
        self.encoded: bytes | memoryview | None = None
        """The stored form, once encoded (kept across retries: encoded once)."""
        self.buffer: bytearray | None = None
        """The pooled buffer ``encoded`` views, given back when the batch is finished."""
        self.raw = False
        """Appended already encoded (``send_raw``)."""
        self.count = 0
        """Messages in a raw batch (from its header); 1 in an :class:`EncodedOne`; 0
        otherwise (``values`` counts them)."""

    @property
    def messages(self) -> int:
        """How many messages the batch holds."""
        return self.count if self.raw else len(self.values)

    def stamp(self, ms: int, index: int) -> None:
        """Message ``index`` (and those after it, until the next stamp) has time ``ms``."""
        runs = self.ts_runs
        if not runs or runs[-1] != ms:
            runs += (index, ms)
        self.ts_start = ms / 1000
        self.ts_end = (ms + 1) / 1000

    @property
    def timestamps(self) -> list[int]:
        """Every message's timestamp, in milliseconds (expanded from the runs)."""
        return list(chain.from_iterable(repeat(ms, n) for ms, n in self._runs()))

    def _runs(self) -> Iterable[tuple[int, int]]:
        """(milliseconds, how many messages) per run."""
        starts = self.ts_runs[0::2]
        ends = [*starts[1:], len(self.values)]
        # zip without strict=: equal by construction; per batch on the producer path, strict= adds a keyword call
        return zip(self.ts_runs[1::2], (end - at for at, end in zip(starts, ends)))  # noqa: B905

    def encode(
        self, codec: int, pool: BufferPool | None = None, producer: tuple[int, int, int] | None = None
    ) -> bytes | memoryview:
        """The batch's stored bytes, encoding it on first use (a large one into a buffer
        of ``pool``, which the accumulator gives back when the batch is finished).
        ``producer`` = ``(producer_id, epoch, base_sequence)`` of an idempotent producer:
        fixed in the bytes at the first encode, so every retry resends the same ones."""
        if self.encoded is None:
            base = self.ts_runs[1]
            deltas: list[int] | None = None
            if len(self.ts_runs) > 2:
                deltas = []
                for ms, n in self._runs():
                    deltas += [ms - base] * n  # list repetition: C speed
            encoded = records.encode_batch_deltas(
                self.values, self.keys, base, deltas, codec, pool.take if pool is not None else None, producer
            )
            if type(encoded) is memoryview:
                self.buffer = encoded.obj  # type: ignore[assignment]  # a pooled bytearray
                self.encoded = encoded
            else:
                self.encoded = encoded if type(encoded) is bytes else memoryview(encoded)
        return self.encoded


class EncodedOne(ProducerBatch, DeliveryFuture):
    """A batch of one message, encoded when it was sent (``batch_messages=1``), and its
    own delivery future: what ``send`` returns is the batch, so a message costs one
    object (the allocation, and the cyclic garbage collector's share of it, were most
    of what a message cost beyond its encoding).

    It never takes more messages, so what a :class:`ProducerBatch` keeps in fields an
    open batch changes (keys, grants, the timestamp window, the buffer) are class
    defaults here; :func:`fast_send` sets four fields. It is queued, taken, retried
    and failed like any batch, and never encoded again (as a retried batch is not).
    Once finished, it drops its bytes (:meth:`Accumulator._release`): a caller that
    keeps the future keeps no copy of the message.
    """

    keys = None
    ts_start = ts_end = 0.0
    room = granted = 0
    count = 1
    buffer = None
    raw = False
    ms: int
    """The message's timestamp (milliseconds)."""

    @property  # the batch is its own future
    def future(self) -> DeliveryFuture:  # type: ignore[override]
        return self

    @property  # read-only: never appended to
    def values(self) -> list[bytes]:  # type: ignore[override]
        """The message, read back from the encoded batch (none once finished)."""
        if self.encoded is None:
            return []
        return records.decode_batches(self.encoded, 0)[0][0].values

    @property
    def ts_runs(self) -> list[int]:  # type: ignore[override]
        return [0, self.ms]

    @property
    def messages(self) -> int:
        return 1


_nbytes_of = attrgetter("nbytes")


class Accumulator:
    """Per-partition queues of batches between ``send`` and the sender thread."""

    def __init__(
        self,
        *,
        linger: float,
        batch_bytes: int,
        batch_messages: int,
        buffer_bytes: int,
        block_timeout: float,
        max_request_bytes: int,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.linger = linger
        self.batch_bytes = batch_bytes
        self.batch_messages = batch_messages
        self.buffer_bytes = buffer_bytes
        self.block_timeout = block_timeout
        self.max_request_bytes = max_request_bytes
        self.clock = clock
        self.lock = threading.Lock()
        self._wake = threading.Condition(self.lock)  # the sender waits for work
        self._space = threading.Condition(self.lock)  # append() waits for buffer space
        self._idle = threading.Condition(self.lock)  # flush() waits for nothing unfinished
        self._queues: dict[TopicPartition, deque[ProducerBatch]] = {}
        self.buffers = BufferPool(keep_bytes=min(max_request_bytes, buffer_bytes))
        """Buffers large batches are encoded into, given back in :meth:`_release`: up
        to a full request's worth kept free (never more than the producer's buffer)."""
        self._open: dict[str, dict[int, ProducerBatch]] = {}
        """Per topic and partition, its newest batch while it still takes messages: the
        last of its queue, not full, not encoded, not raw; none once closed (see
        :func:`fast_send`). Keyed by topic, then partition: the fast path builds no
        tuple."""
        self._in_flight: set[TopicPartition] = set()
        self._retry_at: dict[TopicPartition, float] = {}
        self._committed = 0
        """Bytes of unfinished batches plus the open batches' unused grants."""
        self._granted = 0
        """Bytes of grants not settled yet (their used part included)."""
        self._grant_cap = buffer_bytes // 16
        self._grant_limit = buffer_bytes - buffer_bytes // 4
        self.unfinished = 0
        """Batches created and not yet done or failed."""
        self._flushing = 0
        self._sender_waiting = False
        self._notify_each = False
        """The sender waits and ``linger`` is 0: every append wakes it."""
        self.direct: Callable[[Drained], None] | None = None
        """Sends drained batches in the calling thread (the producer sets it: linger 0,
        acks 1 or all, no idempotence); None: only the sender thread sends."""
        self.closed = False
        self.fatal: BaseException | None = None
        """Why the sender thread died, if it did: every append then fails."""

    @property
    def buffered(self) -> int:
        """Bytes of unfinished batches (what ``buffer_bytes`` bounds)."""
        return self._committed - sum(b.room for parts in self._open.values() for b in parts.values())

    @property
    def open(self) -> dict[TopicPartition, ProducerBatch]:
        """The open batches by (topic, partition): a snapshot, for inspection."""
        return {(topic, partition): batch for topic, parts in self._open.items() for partition, batch in parts.items()}

    # -- the producer's side ---------------------------------------------------------------

    def append(
        self, tp: TopicPartition, values: list[bytes], nbytes: int, key: bytes | None, timestamp: int
    ) -> DeliveryFuture:
        """Add messages to ``tp``'s newest batch (opening batches as they fill).

        Returns the future of the batch holding the last message. Blocks while the
        buffer is full (up to ``block_timeout``, then BufferFullError).
        """
        now = self.clock()
        drained: Drained | None = None
        with self.lock:
            self._check_open()
            self._wait_for_space(nbytes)
            queue = self._queues.get(tp)
            if queue is None:
                queue = self._queues[tp] = deque()
            parts = self._open.get(tp[0])
            batch = None if parts is None else parts.get(tp[1])
            if batch is None:
                batch = self._new_batch(tp, queue, now)
            elif batch.granted:
                self._settle(batch)
            n = len(values)
            start = 0
            ready = False
            while start < n:
                room = self.batch_messages - len(batch.values)
                if room <= 0 or batch.nbytes >= self.batch_bytes:
                    batch = self._new_batch(tp, queue, now)
                    ready = True
                    continue
                take = values[start : start + room] if (start or room < n) else values
                taken = len(take)
                if key is not None and batch.keys is None:
                    batch.keys = [None] * len(batch.values)
                batch.stamp(timestamp, len(batch.values))
                batch.values += take
                if batch.keys is not None:
                    batch.keys += [key] * taken
                batch.nbytes += nbytes if taken == n else sum(map(len, take))
                start += taken
            self._committed += nbytes
            if len(batch.values) >= self.batch_messages or batch.nbytes >= self.batch_bytes:
                self._close_open(tp)
                ready = True
            # No grant here: the first fast send to this batch gets one (_append_one), so
            # a producer that only sends lists pays nothing for grants.
            future = batch.future
            if self._direct_ok():
                drained = self.ready(now)[0]
            elif ready or self.linger <= 0:
                self._notify_sender()
        if drained:
            self.direct(drained)  # type: ignore[misc]  # _direct_ok: set
        return future

    def _append_one(
        self, topic: str, partition: int, batch: ProducerBatch, value: bytes, now: float
    ) -> DeliveryFuture | None:
        """The fast path's message when its batch has no room (lock held): every check
        made exactly, and a new grant. None: the message needs :meth:`append`."""
        if batch.keys is not None:
            return None
        nbytes = len(value)
        self._settle(batch)
        if not self._space_for(nbytes):
            return None  # append() waits for space, or raises
        values = batch.values
        if not batch.ts_start <= now < batch.ts_end:
            batch.stamp(int(now * 1000), len(values))
        values.append(value)
        batch.nbytes += nbytes
        self._committed += nbytes
        if len(values) >= self.batch_messages or batch.nbytes >= self.batch_bytes:
            self._close_open((topic, partition))
            self._notify_sender()
        else:
            self._grant(batch)
            if self._notify_each:
                self._wake.notify()
        return batch.future

    def close_open(self, topic: str) -> None:
        """Take no more messages into ``topic``'s open batches (they stay queued).

        The producer forgot the topic's partition count: the next send to each of its
        partitions takes :meth:`append`'s path again, after the partition is checked.
        """
        with self.lock:
            for batch in self._open.pop(topic, {}).values():
                self._settle(batch)

    def append_raw(self, tp: TopicPartition, data: bytes | memoryview, count: int) -> DeliveryFuture:
        """Queue one already-encoded batch of ``count`` messages as it is."""
        now = self.clock()
        with self.lock:
            self._check_open()
            self._wait_for_space(len(data))
            raw = ProducerBatch(now)
            raw.encoded = data
            raw.raw = True
            raw.nbytes = len(data)
            raw.count = count
            self._close_open(tp)  # later messages go after the raw batch
            self._queues.setdefault(tp, deque()).append(raw)
            self._committed += raw.nbytes
            self.unfinished += 1
            self._notify_sender()
        return raw.future

    def flush(self, timeout: float | None = None) -> None:
        """Make every queued batch ready now and wait until none is unfinished.

        Returns early if the sender thread died (:attr:`fatal`); raises
        RequestTimedOutError after ``timeout`` seconds.
        """
        deadline = None if timeout is None else self.clock() + timeout
        with self.lock:
            self._flushing += 1
            try:
                self._notify_sender(force=True)
                while self.unfinished and self.fatal is None:
                    remaining = None if deadline is None else deadline - self.clock()
                    if remaining is not None and remaining <= 0:
                        raise RequestTimedOutError(f"flush timed out with {self.unfinished} batches unacknowledged")
                    self._idle.wait(remaining if remaining is not None else 1.0)
            finally:
                self._flushing -= 1

    def close(self) -> None:
        """Refuse further appends; the sender drains what is queued and stops."""
        with self.lock:
            self.closed = True
            self._close_all_open()
            self._notify_sender(force=True)

    def set_fatal(self, error: BaseException) -> None:
        """The sender thread died: fail appends, wake whoever waits."""
        with self.lock:
            self.fatal = error
            self._close_all_open()
            self._space.notify_all()
            self._idle.notify_all()

    # -- open batches and grants (lock held) -------------------------------------------------

    def _close_open(self, tp: TopicPartition) -> None:
        """``tp``'s open batch (if any) takes no more messages; its grant is settled."""
        parts = self._open.get(tp[0])
        if parts is not None:
            batch = parts.pop(tp[1], None)
            if batch is not None:
                self._settle(batch)
            if not parts:
                del self._open[tp[0]]

    def _close_all_open(self) -> None:
        for parts in self._open.values():
            for batch in parts.values():
                self._settle(batch)
        self._open.clear()

    def _settle(self, batch: ProducerBatch) -> None:
        """Count the bytes the fast path added into ``nbytes``; give back the unused grant."""
        granted = batch.granted
        if granted:
            room = batch.room
            batch.nbytes += granted - room
            self._committed -= room
            self._granted -= granted
            batch.granted = batch.room = 0

    def _grant(self, batch: ProducerBatch) -> None:
        """Set bytes aside for ``batch``'s fast appends (an open, keyless, settled batch)."""
        if batch.keys is not None:
            return
        grant = min(self.batch_bytes - 1 - batch.nbytes, self._grant_cap)
        if grant > 0 and self._committed + grant <= self._grant_limit:
            batch.granted = batch.room = grant
            self._committed += grant
            self._granted += grant

    def _space_for(self, nbytes: int) -> bool:
        """Whether ``nbytes`` more fit in the buffer now (settling every grant if that
        decides it). One append larger than the whole buffer fits an empty buffer."""
        if self._committed + nbytes <= self.buffer_bytes:
            return True
        if self._granted:
            for parts in self._open.values():
                for batch in parts.values():
                    self._settle(batch)
        return self._committed + nbytes <= self.buffer_bytes or self._committed == 0

    def _new_batch(self, tp: TopicPartition, queue: deque[ProducerBatch], now: float) -> ProducerBatch:
        batch = ProducerBatch(now)
        queue.append(batch)
        self._close_open(tp)
        self._open.setdefault(tp[0], {})[tp[1]] = batch
        self.unfinished += 1
        if not self._direct_ok():  # else the appending thread sends it (direct)
            self._notify_sender()  # a sleeping sender must learn this batch's linger deadline
        return batch

    def _wait_for_space(self, nbytes: int) -> None:
        if self._committed + nbytes <= self.buffer_bytes or self._space_for(nbytes):
            return
        deadline = self.clock() + self.block_timeout
        while not self._space_for(nbytes):
            self._check_open()
            remaining = deadline - self.clock()
            if remaining <= 0:
                raise BufferFullError(
                    f"producer buffer full ({self._committed} of {self.buffer_bytes} bytes) "
                    f"for {self.block_timeout}s: the brokers are down or slower than the "
                    f"producer"
                )
            self._notify_sender(force=True)
            self._space.wait(remaining)

    def _check_open(self) -> None:
        if self.closed:
            raise ProducerClosedError("producer is closed")
        if self.fatal is not None:
            raise ProducerClosedError(f"producer's sender thread died: {self.fatal}")

    def _direct_ok(self) -> bool:
        """Whether the appending thread may send the ready batches itself (lock held):
        linger 0, a direct sender, the sender thread idle and waiting, nothing in
        flight or backing off, not flushing, closed or dead."""
        return (
            self._sender_waiting
            and self._notify_each
            and self.direct is not None
            and not self._in_flight
            and not self._retry_at
            and not self._flushing
            and not self.closed
            and self.fatal is None
        )

    def _notify_sender(self, force: bool = False) -> None:
        if self._sender_waiting or force:
            self._wake.notify()

    # -- the sender's side -----------------------------------------------------------------

    def ready(self, now: float) -> tuple[Drained, float]:
        """Take the ready batches of every partition not in flight (lock held).

        Returns them (their partitions are now in flight) and how long until the next
        partition may become ready (at most 0.5 s).
        """
        drained: Drained = {}
        next_wake = 0.5
        for tp, queue in self._queues.items():
            if not queue or tp in self._in_flight:
                continue
            retry_at = self._retry_at.get(tp)
            if retry_at is not None:
                if retry_at > now:
                    next_wake = min(next_wake, retry_at - now)
                    continue
                del self._retry_at[tp]
            first = queue[0]
            age = now - first.created
            # An open batch's nbytes lags its fast appends, but those never take it to
            # batch_bytes (its grant stops below): the checks hold before settling.
            if (
                len(queue) > 1
                or age >= self.linger
                or self._flushing
                or self.closed
                or first.raw
                or first.encoded is not None
                or len(first.values) >= self.batch_messages
                or first.nbytes >= self.batch_bytes
            ):
                if queue[-1].granted:
                    self._settle(queue[-1])  # the open batch: sizes exact before taking
                drained[tp] = self._take(queue)
                if not queue:
                    self._close_open(tp)  # the open batch is taken: it takes no more
                self._in_flight.add(tp)
            else:
                next_wake = min(next_wake, self.linger - age)
        return drained, next_wake

    def next_ready(self, max_wait: float = 0.5) -> Drained | None:
        """Wait up to ``max_wait`` for ready batches and take them.

        Returns ``{}`` when none became ready in time (the sender does its
        housekeeping and asks again), None once closed with nothing left to send.
        """
        with self.lock:
            deadline = self.clock() + max_wait
            while True:
                now = self.clock()
                drained, next_wake = self.ready(now)
                if drained:
                    return drained
                if self.closed and not self.unfinished:
                    return None
                if self.closed and not self._in_flight and not any(self._queues.values()):
                    return None
                if now >= deadline:
                    return {}
                self._sender_waiting = True
                self._notify_each = self.linger <= 0
                try:
                    self._wake.wait(max(min(next_wake, deadline - now), 0.0005))
                finally:
                    self._sender_waiting = self._notify_each = False

    def _take(self, queue: deque[ProducerBatch]) -> list[ProducerBatch]:
        """Pop the queue's oldest batches, up to ``max_request_bytes`` (at least one)."""
        if len(queue) > 1 and sum(map(_nbytes_of, queue)) <= self.max_request_bytes:
            taken = list(queue)  # all of it (a run of one-message batches): no loop
            queue.clear()
            return taken
        taken = [queue.popleft()]
        size = taken[0].nbytes
        while queue and size + queue[0].nbytes <= self.max_request_bytes:
            batch = queue.popleft()
            taken.append(batch)
            size += batch.nbytes
        return taken

    def give_back(self, drained: Drained) -> None:
        """Batches taken for a direct send that the sender thread must send instead:
        back to the front of their queues, out of flight, the sender woken."""
        with self.lock:
            for tp, batches in drained.items():
                self._queues.setdefault(tp, deque()).extendleft(reversed(batches))
                self._in_flight.discard(tp)
            self._notify_sender(force=True)

    def done(self, tp: TopicPartition, batches: list[ProducerBatch]) -> None:
        """The batches were delivered (their futures are complete): free their space.
        The sender is woken only if the partition has more to send (or the producer
        closes): at low rates, with direct sends, it stays asleep."""
        with self.lock:
            self._in_flight.discard(tp)
            self._release(batches)
            if self._queues.get(tp) or self.closed:
                self._notify_sender(force=True)

    def retry(self, tp: TopicPartition, batches: list[ProducerBatch], at: float) -> None:
        """Put the batches back at the front of their queue, not ready before ``at``."""
        with self.lock:
            self._queues.setdefault(tp, deque()).extendleft(reversed(batches))
            self._in_flight.discard(tp)
            self._retry_at[tp] = at
            self._notify_sender(force=True)

    def fail(self, tp: TopicPartition, batches: list[ProducerBatch]) -> list[ProducerBatch]:
        """The batches failed for good: so do the partition's queued ones.

        Frees their space and returns every failed batch; the caller completes their
        futures with the error (outside the lock).
        """
        with self.lock:
            self._close_open(tp)
            queue = self._queues.get(tp)
            if queue:
                batches = batches + list(queue)
                queue.clear()
            self._in_flight.discard(tp)
            self._release(batches)
            self._notify_sender(force=True)
        return batches

    def abort_all(self) -> list[ProducerBatch]:
        """Remove every queued batch (closing, or the sender died); returns them."""
        with self.lock:
            self._close_all_open()
            leftovers = [b for q in self._queues.values() for b in q]
            for queue in self._queues.values():
                queue.clear()
            self._release(leftovers)
        return leftovers

    def _release(self, batches: Iterable[ProducerBatch]) -> None:
        """Free buffer space of finished batches (lock held; they are settled)."""
        committed = finished = 0
        for batch in batches:
            committed += batch.nbytes
            finished += 1
            if batch.buffer is not None:  # finished: nothing reads its bytes any more
                batch.encoded = None  # no view of a buffer the next batch overwrites
                self.buffers.give(batch.buffer)
                batch.buffer = None
            elif batch.count:  # appended encoded (raw, or one message: its own future)
                batch.encoded = None  # a future kept by the caller keeps no bytes
        self._committed -= committed
        self.unfinished -= finished
        self._space.notify_all()
        if not self.unfinished:
            self._idle.notify_all()


class SendFunction(Protocol):
    """The signature of ``Producer.send`` (what :func:`fast_send` builds)."""

    def __call__(
        self,
        topic: str,
        messages: Any,
        key: bytes | None = None,
        partition: int | None = None,
        timestamp: int | None = None,
    ) -> DeliveryFuture: ...


def fast_send(
    acc: Accumulator,
    choose: Callable[[str], int | None],
    general: SendFunction,
    clock: Callable[[], float] = time.time,
    encode_single: Callable[[bytes, int], bytes] | None = None,
    partition_counts: dict[str, int] | None = None,
) -> SendFunction:
    """``Producer.send`` with its common case done here, in one Python call.

    The common case: one keyless message (bytes, or a list of one) stamped now
    (``clock()``), to a partition (given, or ``choose(topic)``'s, None if not known
    yet) whose open batch has room: one lock, two dict lookups and one check of the
    batch's ``room`` (its grant, see the module docstring), which stands for the buffer
    bound, ``batch_bytes`` and the batch being open and keyless. Without room,
    :meth:`Accumulator._append_one` makes each check exactly. Anything else (a key, a
    timestamp, several messages, no open batch, a keyed batch, a full buffer, closed)
    goes to ``general`` (the producer's checked path, ending in
    :meth:`Accumulator.append`), which gives the same results.

    With ``encode_single`` (given when ``batch_messages`` is 1 and batches are neither
    compressed nor numbered for idempotence), every message is a batch of its own: it
    is encoded here, by ``encode_single(value, ms)``, into an :class:`EncodedOne`
    (built before the lock is taken: nothing shared) and queued behind the partition's
    batches, with the checks :meth:`Accumulator.append` makes, made exactly: not
    closed, no open batch of the topic to close first, room in the buffer (otherwise
    ``general``, which waits for room or raises as it always does). Only to a partition
    that ``partition_counts`` (the producer's, by topic) says exists: an unknown topic
    or partition goes to ``general``, which learns or refuses it. The sender is woken
    only while it waits, and once per wait: when it runs it takes the whole queue.

    A closure, not a method: at a million calls a second, each attribute lookup and
    call saved is a few percent of ``send``'s cost.
    """
    open_get = acc._open.get  # the dict is never replaced, only changed
    acquire = acc.lock.acquire
    release = acc.lock.release
    batch_messages = acc.batch_messages
    append_one = acc._append_one
    counts = partition_counts if partition_counts is not None else {}  # the same dict
    one_message = (
        _one_message_send(acc, choose, clock, encode_single, counts) if encode_single is not None else _general_only
    )

    def send(
        topic: str, messages: Any, key: bytes | None = None, partition: int | None = None, timestamp: int | None = None
    ) -> DeliveryFuture:
        if key is None and timestamp is None:
            if type(messages) is list:
                value = messages[0] if len(messages) == 1 else None
            else:
                value = messages if type(messages) is bytes else None
            if encode_single is None:
                if partition is None and value is not None:
                    partition = choose(topic)
                if partition is not None and value is not None:
                    now = clock()
                    acquire()
                    try:
                        parts = open_get(topic)
                        batch = None if parts is None else parts.get(partition)
                        if batch is not None:
                            room = batch.room - len(value)
                            if room >= 0:
                                batch.room = room
                                values = batch.values
                                if not batch.ts_start <= now < batch.ts_end:
                                    batch.stamp(int(now * 1000), len(values))
                                values.append(value)
                                if len(values) >= batch_messages:
                                    acc._close_open((topic, partition))
                                    acc._notify_sender()
                                elif acc._notify_each:
                                    acc._wake.notify()
                                return batch.future
                            future = append_one(topic, partition, batch, value, now)
                            if future is not None:
                                return future
                    finally:
                        release()
            elif type(value) is bytes:  # one-message batches
                future = one_message(topic, value, partition)
                if future is not None:
                    return future
        return general(topic, messages, key, partition, timestamp)

    return send


def _general_only(topic: str, value: bytes, partition: int | None) -> None:
    """No one-message batches (no ``encode_single``): everything takes the general path."""
    return None


def _one_message_send(
    acc: Accumulator,
    choose: Callable[[str], int | None],
    clock: Callable[[], float],
    encode_single: Callable[[bytes, int], bytes],
    partition_counts: dict[str, int],
) -> Callable[[str, bytes, int | None], DeliveryFuture | None]:
    """:func:`fast_send`'s path for one-message batches: ``(topic, value, partition)``
    to the queued :class:`EncodedOne` (the future), or None for the general path. Its
    own closure, so the general fast path does not pay for its variables."""
    counts_get = partition_counts.get
    acquire = acc.lock.acquire
    release = acc.lock.release
    queues = acc._queues  # never replaced, and a queue is never removed
    by_topic: dict[str, dict[int, deque[ProducerBatch]]] = {}
    """The same deques by topic, then partition: no tuple per message."""
    topics_get = by_topic.get
    open_ = acc._open
    buffer_bytes = acc.buffer_bytes
    notify = acc._wake.notify
    created = acc.clock
    new = object.__new__
    one = EncodedOne
    ms, ms_start, ms_end = 0, 0.0, 0.0
    """The last millisecond stamped, and its span in ``clock()`` seconds."""

    def queue_of(topic: str, partition: int) -> deque[ProducerBatch]:
        """The partition's queue (lock held), made on first use."""
        queue = queues.get((topic, partition))
        if queue is None:
            queue = queues[(topic, partition)] = deque()
        by_topic.setdefault(topic, {})[partition] = queue
        return queue

    def one_message(topic: str, value: bytes, partition: int | None) -> DeliveryFuture | None:
        nonlocal ms, ms_start, ms_end
        if partition is None:
            partition = 0 if counts_get(topic) == 1 else choose(topic)
            if partition is None:
                return None
        elif not 0 <= partition < counts_get(topic, 0):
            return None  # an unknown topic, or out of range: general learns or refuses
        now = clock()
        if not ms_start <= now < ms_end:  # a new millisecond: convert once
            ms = int(now * 1000)
            ms_start, ms_end = ms / 1000, (ms + 1) / 1000
        nbytes = len(value)
        batch = new(one)
        batch.ms = ms
        batch.nbytes = nbytes
        batch.created = created()
        batch.encoded = encode_single(value, ms)
        acquire()
        try:
            if (
                acc.closed
                or acc.fatal is not None
                or topic in open_
                or (acc._committed + nbytes > buffer_bytes and not acc._space_for(nbytes))
            ):
                return None
            topic_queues = topics_get(topic)
            queue = topic_queues.get(partition) if topic_queues is not None else None
            if queue is None:
                queue = queue_of(topic, partition)
            queue.append(batch)
            acc._committed += nbytes
            acc.unfinished += 1
            if acc._sender_waiting:
                acc._sender_waiting = False  # woken once: it takes the whole queue
                notify()
            return batch
        finally:
            release()

    return one_message


__all__ = ["Accumulator", "EncodedOne", "ProducerBatch", "SendFunction", "fast_send"]
