"""Delivery: what the fetcher, the coordinator and the application's threads share.

The fetcher thread turns fetched batches into :class:`Chunk` objects and appends them
to a :class:`StreamQueue`; the application takes messages out through a
:class:`Reader` (a :class:`MessageStream`, or the consumer's own iteration and
``poll``); the coordinator starts and stops partitions. All of it is guarded by one
lock in :class:`GroupState`, never held across network or ZooKeeper calls, so no
thread can block another for longer than a few list operations.

Positions. A partition's ``position`` is what the application has processed, as the
committed form ``(offset, skip)`` (see :mod:`broker.client.group.offsets`). A message
handed out is *in flight*; it counts as processed when its reader is asked for the
next message (``next()`` again, or the next ``poll()``), and only then does the
position move past it. Commits write positions, so a crash re-delivers at most what
was in flight or processed since the last commit, and never skips anything.

Epochs. Every start of a partition (claim, seek, move to another stream) gets a fresh
``epoch``; chunks and fetch requests carry the epoch they were made under. Stopping a
partition sets ``active`` to False (nothing more is delivered, in-flight messages can
still be acknowledged) and releasing it sets ``epoch`` to 0 (late acknowledgements
and late fetch responses are ignored). Nothing stale can reach the application or
move a position, whatever order threads run in.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Iterator
from typing import NamedTuple

from broker.client.consumer import Message
from broker.common.errors import LogferryError

TopicPartition = tuple[str, int]
Position = tuple[int, int]
"""``(offset, skip)``: the batch at ``offset``, of which ``skip`` messages are processed."""


class RawBatch(NamedTuple):
    """One fetched batch exactly as stored, undecoded (``GroupConsumer(raw_batches=True)``).

    Raw mode exists for pipes of batches (the mirror): the CRC is checked, the
    payload is never unpacked, so compressed batches stay compressed.
    """

    offset: int
    """Logical byte offset of the batch in its partition."""
    next_offset: int
    """Offset of the batch after it."""
    count: int  # type: ignore[assignment]  # a field named like tuple.count (public API)
    """Number of messages it holds (from its header)."""
    raw: memoryview
    """The stored bytes, header included (``Producer.send_raw`` takes them as they are)."""


class ConsumerClosedError(LogferryError):
    """The group consumer was closed (or failed); create a new one to consume again."""


class PartitionState:
    """One owned partition: where fetching stands and what the application processed."""

    __slots__ = (
        "topic",
        "partition",
        "stream",
        "stream_index",
        "epoch",
        "active",
        "generation",
        "position",
        "committed",
        "fetch_offset",
        "skip_at",
        "in_flight",
        "retry_at",
        "failures",
        "max_bytes",
        "address",
        "log_start",
        "log_end",
        "avg_message_bytes",
        "fetched_messages",
    )

    def __init__(
        self,
        topic: str,
        partition: int,
        stream: StreamQueue,
        stream_index: int,
        epoch: int,
        generation: int,
        max_bytes: int,
    ):
        self.topic = topic
        self.partition = partition
        self.stream = stream
        """Queue its chunks go to."""
        self.stream_index = stream_index
        """Index of that stream in the member's thread list (the assignment's answer)."""
        self.epoch = epoch
        """Identity of this start; 0 once released (see the module docstring)."""
        self.active = False
        """Fetch and deliver (False while stopping, before the coordinator starts it)."""
        self.generation = generation
        """ZooKeeper session generation it was claimed under (commits check it)."""
        self.position: Position | None = None
        """Processed position; None until the start offset is known."""
        self.committed: Position | None = None
        """Last position written to ZooKeeper."""
        self.fetch_offset: int | None = None
        """Next offset to fetch; None until resolved from the start policy."""
        self.skip_at: Position | None = None
        """Drop the first ``skip`` messages of the batch at ``offset`` when it arrives."""
        self.in_flight = False
        """A fetch request for it is outstanding."""
        self.retry_at = 0.0
        """Monotonic time before which it is not fetched (backoff after errors)."""
        self.failures = 0
        self.max_bytes = max_bytes
        """Fetch size; grows when a single batch is larger."""
        self.address: tuple[str, int] | None = None
        """Broker hosting it, as last resolved."""
        self.log_start = -1
        self.log_end = -1
        """The partition's visible end at the last fetch (for lag)."""
        self.avg_message_bytes = 0.0
        self.fetched_messages = 0

    @property
    def tp(self) -> TopicPartition:
        return self.topic, self.partition

    def __repr__(self) -> str:
        return (
            f"PartitionState({self.topic}-{self.partition}, epoch={self.epoch}, "
            f"active={self.active}, position={self.position}, fetch={self.fetch_offset})"
        )


class Chunk:
    """Decoded messages of one fetched batch, on their way to the application."""

    __slots__ = ("state", "epoch", "offset", "next_offset", "messages", "start", "nbytes")

    def __init__(
        self,
        state: PartitionState,
        epoch: int,
        offset: int,
        next_offset: int,
        messages: list[Message],
        start: int,
        nbytes: int,
    ):
        self.state = state
        self.epoch = epoch
        self.offset = offset
        self.next_offset = next_offset
        self.messages = messages
        self.start = start
        """First message to deliver (the ``skip`` of a resumed batch)."""
        self.nbytes = nbytes
        """Stored size of the batch (what the queue bound counts)."""

    def position_after(self, index: int) -> Position:
        """Position once messages ``[0, index)`` are processed."""
        if index >= len(self.messages):
            return self.next_offset, 0
        return self.offset, index


class StreamQueue:
    """Chunks waiting for one stream, bounded in bytes (the fetcher's backpressure)."""

    __slots__ = ("index", "chunks", "nbytes")

    def __init__(self, index: int):
        self.index = index
        self.chunks: deque[Chunk] = deque()
        self.nbytes = 0


class GroupState:
    """Everything the consumer's threads share, under one lock (module docstring)."""

    def __init__(self, queue_bytes: int):
        self.lock = threading.Lock()
        self.data_ready = threading.Condition(self.lock)
        """Readers wait here for chunks, resumption or close."""
        self.fetch_wake = threading.Condition(self.lock)
        """The fetcher waits here for responses, new partitions or queue space."""
        self.acked = threading.Condition(self.lock)
        """The coordinator waits here for acknowledgements and idle fetches."""
        self.ack_waiters = 0
        self.queue_bytes = queue_bytes
        self.partitions: dict[TopicPartition, PartitionState] = {}
        """Partitions this member owns in ZooKeeper (active or being stopped)."""
        self.readers: list[Reader] = []
        self.paused = False
        """ZooKeeper connection suspended: no fetching, no delivery."""
        self.closed = False
        self.failure: BaseException | None = None
        """A background thread died of this; readers raise it."""
        self.generation = 1
        """Bumped when the ZooKeeper session is lost."""
        self.delivered = 0
        """Messages of the batches taken by readers (counted per batch, not per call)."""
        self._epochs = itertools.count(1)

    def next_epoch(self) -> int:
        """A fresh epoch (lock held)."""
        return next(self._epochs)

    def invalidate_readers(self) -> None:
        """Send every reader's next call through its slow path (lock held)."""
        for reader in self.readers:
            reader._fast = False

    def materialize(self) -> None:
        """Bring every partition's ``position`` up to what readers acknowledged (lock held)."""
        for reader in self.readers:
            reader.materialize()

    # -- stopping and starting partitions (lock held) ----------------------------------

    def stop(self, states: list[PartitionState]) -> None:
        """Stop fetching and delivering ``states``; drop their queued chunks.

        In-flight messages may still be acknowledged until :meth:`release`.
        """
        doomed = set(map(id, states))
        self.materialize()
        self.invalidate_readers()
        for ps in states:
            ps.active = False
        for queue in {id(ps.stream): ps.stream for ps in states}.values():
            if any(id(c.state) in doomed for c in queue.chunks):
                kept = deque(c for c in queue.chunks if id(c.state) not in doomed)
                queue.chunks = kept
                queue.nbytes = sum(c.nbytes for c in kept)
        self.fetch_wake.notify_all()

    def release(self, states: list[PartitionState]) -> None:
        """Forget ``states`` for good: late acks and fetch responses are ignored."""
        self.invalidate_readers()
        for ps in states:
            ps.active = False
            ps.epoch = 0
            if self.partitions.get(ps.tp) is ps:
                del self.partitions[ps.tp]

    def busy(self, states: list[PartitionState]) -> bool:
        """True while a fetch is outstanding or a reader holds an unacknowledged message."""
        ids = set(map(id, states))
        if any(ps.in_flight for ps in states):
            return True
        return any(reader.holds(ids) for reader in self.readers)

    def drop_everything(self) -> list[PartitionState]:
        """The session is gone: forget every partition and every queued chunk."""
        dropped = list(self.partitions.values())
        self.release(dropped)
        self.partitions.clear()
        queues = {id(ps.stream): ps.stream for ps in dropped}
        for queue in queues.values():
            queue.chunks.clear()
            queue.nbytes = 0
        self.generation += 1
        self.fetch_wake.notify_all()
        self.data_ready.notify_all()
        self.acked.notify_all()
        return dropped

    def wait_idle(self, states: list[PartitionState], timeout: float) -> bool:
        """Wait (bounded) until :meth:`busy` is False; True if it became so."""
        deadline = time.monotonic() + timeout
        with self.lock:
            self.ack_waiters += 1
            try:
                while self.busy(states):
                    remaining = deadline - time.monotonic()
                    if remaining <= 0 or self.closed:
                        return False
                    self.acked.wait(min(remaining, 0.1))
                return True
            finally:
                self.ack_waiters -= 1

    def fail(self, error: BaseException) -> None:
        """A background thread died: wake everyone so readers raise ``error``."""
        with self.lock:
            if self.failure is None:
                self.failure = error
            self.invalidate_readers()
            self.data_ready.notify_all()
            self.fetch_wake.notify_all()
            self.acked.notify_all()


class Reader:
    """Hands out messages from some stream queues and acknowledges them on the next call.

    One reader is meant for one application thread. A :class:`MessageStream` reads
    one queue; the consumer's own iteration and ``poll`` read all of its queues.

    Hot path: while nothing changed since the last call (``_fast``), ``next()`` only
    bumps an index: handing out message ``i`` of the current chunk acknowledges
    ``i - 1``. The processed position of the current chunk is therefore implicit
    (``_index - 1`` while a message is held) and written to its partition only when
    someone needs it (:meth:`materialize`: commits, releases, chunk changes). Whoever
    changes what may be delivered (stopping a partition, pausing, closing) clears
    ``_fast`` of every reader through :meth:`GroupState.invalidate_readers`, sending
    the next call through the slow path, which re-checks everything.
    """

    def __init__(self, state: GroupState, queues: list[StreamQueue], timeout: float | None):
        self._state = state
        self._queues = queues
        self._timeout = timeout
        self._chunk: Chunk | None = None
        self._msgs: list[Message] = []
        self._n = 0
        self._index = 0
        self._held = False  # message _index - 1 of _chunk is out, not yet acknowledged
        self._fast = False
        self._rr = 0
        self._many: list[tuple[Chunk, int]] = []  # out after poll(): (chunk, end) runs
        with state.lock:
            state.readers.append(self)

    # -- acknowledgement (lock held) -------------------------------------------------------

    def holds(self, state_ids: set[int]) -> bool:
        """True if an unacknowledged message of one of these partitions is out."""
        chunk = self._chunk
        if self._held and chunk is not None and id(chunk.state) in state_ids:
            return True
        return any(id(chunk.state) in state_ids for chunk, _ in self._many)

    def materialize(self) -> None:
        """Write the current chunk's processed position to its partition (lock held)."""
        chunk = self._chunk
        if chunk is not None and not self._many:
            ps = chunk.state
            if ps.epoch == chunk.epoch:
                done = self._index - 1 if self._held else self._index
                if done > chunk.start or self._held or done == len(chunk.messages):
                    ps.position = chunk.position_after(done)

    def _ack(self) -> None:
        """Count everything handed out as processed (lock held)."""
        if self._held:
            self._held = False
            self.materialize()
        if self._many:
            for chunk, end in self._many:
                ps = chunk.state
                if ps.epoch == chunk.epoch:
                    ps.position = chunk.position_after(end)
            self._many = []
        if self._state.ack_waiters:
            self._state.acked.notify_all()

    def acknowledge(self) -> None:
        """Count every message handed out so far as processed."""
        with self._state.lock:
            self._ack()

    # -- taking chunks (lock held) ---------------------------------------------------------

    def _current(self) -> Chunk | None:
        """The chunk to deliver from, advancing past spent or stale ones; None if none."""
        chunk = self._chunk
        if chunk is not None:
            ps = chunk.state
            if self._index < self._n and chunk.epoch == ps.epoch and ps.active:
                return chunk
            self.materialize()  # a spent chunk moves its partition past it
        state = self._state
        queues = self._queues
        n = len(queues)
        limit = state.queue_bytes
        for step in range(n):
            queue = queues[(self._rr + step) % n]
            while queue.chunks:
                chunk = queue.chunks.popleft()
                before = queue.nbytes
                queue.nbytes -= chunk.nbytes
                if before >= limit > queue.nbytes:
                    state.fetch_wake.notify_all()
                ps = chunk.state
                if chunk.epoch == ps.epoch and ps.active and chunk.start < len(chunk.messages):
                    state.delivered += len(chunk.messages) - chunk.start
                    self._rr = (self._rr + step + 1) % n
                    self._set_chunk(chunk)
                    return chunk
        self._set_chunk(None)
        return None

    def _set_chunk(self, chunk: Chunk | None) -> None:
        self._chunk = chunk
        self._held = False
        if chunk is None:
            self._msgs, self._n, self._index = [], 0, 0
        else:
            self._msgs, self._n, self._index = chunk.messages, len(chunk.messages), chunk.start

    def _check_open(self) -> None:
        state = self._state
        if state.failure is not None:
            raise ConsumerClosedError(f"group consumer failed: {state.failure!r}") from state.failure
        if state.closed:
            raise StopIteration

    # -- the application's calls -------------------------------------------------------------

    def __iter__(self) -> Iterator[Message]:
        return self

    def __next__(self) -> Message:
        """The next message; acknowledges the previous one. Blocks while none is ready.

        Raises StopIteration once the consumer is closed, or after ``timeout`` seconds
        without a message when the consumer was given ``iter_timeout`` (iterating again
        later resumes).
        """
        with self._state.lock:
            if self._fast:
                i = self._index
                if i < self._n:
                    self._index = i + 1
                    return self._msgs[i]
            return self._next_slow()

    def _next_slow(self) -> Message:
        state = self._state
        self._fast = False
        if self._held or self._many:
            self._ack()
        deadline = None
        while True:
            self._check_open()
            if not state.paused:
                chunk = self._current()
                if chunk is not None:
                    i = self._index
                    self._index = i + 1
                    self._held = True
                    self._fast = True
                    return self._msgs[i]
            if self._timeout is None:
                state.data_ready.wait(1.0)
                continue
            now = time.monotonic()
            if deadline is None:
                deadline = now + self._timeout
            if now >= deadline:
                raise StopIteration
            state.data_ready.wait(deadline - now)

    def poll(self, timeout: float = 0.0, max_messages: int = 10_000) -> list[Message]:
        """Up to ``max_messages`` ready messages, waiting up to ``timeout`` s for the first.

        Acknowledges everything the previous call handed out. Returns [] on timeout and
        once the consumer is closed.
        """
        state = self._state
        deadline = time.monotonic() + max(timeout, 0.0)
        out: list[Message] = []
        with state.lock:
            self._fast = False
            if self._held or self._many:
                self._ack()
            while True:
                try:
                    self._check_open()
                except StopIteration:
                    return out
                if not state.paused:
                    while len(out) < max_messages:
                        chunk = self._current()
                        if chunk is None:
                            break
                        i = self._index
                        end = min(self._n, i + max_messages - len(out))
                        out.extend(self._msgs[i:end])
                        self._index = end
                        self._many.append((chunk, end))
                    if out:
                        return out
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return out
                state.data_ready.wait(remaining)

    def poll_batches(
        self, timeout: float = 0.0, max_bytes: int = 8 * 1024 * 1024, acknowledge: bool = True
    ) -> list[tuple[TopicPartition, RawBatch]]:
        """Ready raw batches (consumer in raw mode), up to about ``max_bytes`` of them.

        Same contract as :meth:`poll`, one batch per item: waits up to ``timeout`` s for
        the first, always returns at least one when any is ready, and acknowledges
        everything the previous call handed out, unless ``acknowledge`` is False: then
        batches stay in flight until :meth:`acknowledge_through` covers them.
        """
        state = self._state
        deadline = time.monotonic() + max(timeout, 0.0)
        out: list[tuple[TopicPartition, RawBatch]] = []
        nbytes = 0
        with state.lock:
            self._fast = False
            if acknowledge and (self._held or self._many):
                self._ack()
            while True:
                try:
                    self._check_open()
                except StopIteration:
                    return out
                if not state.paused:
                    while nbytes < max_bytes:
                        chunk = self._current()
                        if chunk is None:
                            break
                        tp = chunk.state.tp
                        for batch in self._msgs[self._index : self._n]:
                            out.append((tp, batch))  # type: ignore[arg-type]
                        nbytes += chunk.nbytes
                        self._index = self._n
                        self._many.append((chunk, self._n))
                    if out:
                        return out
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return out
                state.data_ready.wait(remaining)

    def acknowledge_through(self, positions: dict[TopicPartition, int]) -> None:
        """Count handed-out batches as processed, per partition, up to an offset.

        ``positions[tp]`` is the offset after the last processed batch of ``tp``: every
        batch of it handed out and ending at or before that offset counts as processed.
        For pipelines (the mirror) that process several polls at once and learn of the
        outcomes out of order; acknowledgements of released partitions are ignored.
        """
        with self._state.lock:
            kept = []
            for chunk, end in self._many:
                upto = positions.get(chunk.state.tp)
                if upto is None or chunk.next_offset > upto:
                    kept.append((chunk, end))
                    continue
                ps = chunk.state
                if ps.epoch == chunk.epoch:
                    ps.position = chunk.position_after(end)
            self._many = kept
            if self._state.ack_waiters:
                self._state.acked.notify_all()

    def detach(self) -> None:
        """Stop taking part in in-flight tracking (the reader is discarded)."""
        with self._state.lock:
            if self in self._state.readers:
                self._state.readers.remove(self)


class MessageStream(Reader):
    """One of the paper's message streams: an iterator of :class:`Message`.

    The group's partitions assigned to this stream's thread are delivered here, each
    in order. Iterate it from one thread; a message counts as processed when the
    iterator is asked for the next one.
    """

    def __init__(self, state: GroupState, queue: StreamQueue, timeout: float | None, topics: tuple[str, ...]):
        super().__init__(state, [queue], timeout)
        self.queue = queue
        self.topics = topics
        """Topics that feed this stream (empty for a pattern subscription: any match)."""

    def __repr__(self) -> str:
        return f"MessageStream(index={self.queue.index}, topics={list(self.topics)})"


__all__ = [
    "Chunk",
    "ConsumerClosedError",
    "GroupState",
    "MessageStream",
    "PartitionState",
    "Position",
    "RawBatch",
    "Reader",
    "StreamQueue",
    "TopicPartition",
]
