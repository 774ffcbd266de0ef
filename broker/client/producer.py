"""The producer: the paper's ``send(topic, messages)`` with background batching.

``send`` appends values to the open batch of a partition (an accumulator guarded by
one lock) and returns at once. A sender thread drains ready batches (full, or older
than ``linger_ms``), encodes each in one msgpack call, groups them by broker into one
produce request per broker, and pipelines those requests. Each partition has at most
one request in flight, so retries never reorder a partition's messages.
"""

from __future__ import annotations

import _thread
import itertools
import logging
import random
import threading
import time
import zlib
from collections import deque
from typing import Any, Callable, Iterable, Sequence

from broker.wire import protocol, records
from broker.client.cluster import Cluster
from broker.client.connection import ResponseFuture
from broker.common.errors import (
    BrokerNotAvailableError,
    BufferFullError,
    ConfigError,
    LogferryError,
    ProducerClosedError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
    error_for_code,
)

log = logging.getLogger("logferry.producer")

Values = bytes | Sequence[bytes]


class DeliveryFuture:
    """Completion of one batch: its base offset (None with acks=0) or its error."""

    __slots__ = ("_lock", "_done", "offset", "_error", "_callbacks", "_callbacks_lock")

    def __init__(self) -> None:
        self._lock = _thread.allocate_lock()
        self._lock.acquire()
        self._callbacks_lock = _thread.allocate_lock()
        self._done = False
        self.offset: int | None = None
        self._error: LogferryError | None = None
        self._callbacks: list[Callable[["DeliveryFuture"], None]] | None = None

    def _complete(self, offset: int | None, error: LogferryError | None = None) -> None:
        with self._callbacks_lock:
            if self._done:
                return
            self.offset = offset
            self._error = error
            self._done = True
            callbacks, self._callbacks = self._callbacks, None
        self._lock.release()
        for callback in callbacks or ():
            try:
                callback(self)
            except Exception:
                log.exception("delivery callback failed")

    def done(self) -> bool:
        """True once the batch was acknowledged or failed."""
        return self._done

    def exception(self) -> LogferryError | None:
        """The delivery error, or None (also while pending)."""
        return self._error

    def wait(self, timeout: float | None = None) -> int | None:
        """Block until done; return the base offset or raise the delivery error."""
        if not self._done:
            if not self._lock.acquire(timeout=-1 if timeout is None else max(timeout, 0)):
                raise RequestTimedOutError(f"message not acknowledged within {timeout}s")
            self._lock.release()
        if self._error is not None:
            raise self._error
        return self.offset

    def add_callback(self, fn: Callable[["DeliveryFuture"], None]) -> None:
        """Call ``fn(self)`` when done (at once if already done)."""
        with self._callbacks_lock:
            if not self._done:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(fn)
                return
        fn(self)  # already done: exactly once, here


class _Batch:
    """Messages of one partition waiting to be sent, as columns."""

    __slots__ = ("values", "keys", "timestamps", "nbytes", "created", "future", "encoded",
                 "raw", "count")

    def __init__(self, now: float):
        self.values: list = []
        self.keys: list | None = None
        self.timestamps: list[int] = []
        self.nbytes = 0
        self.created = now
        self.future = DeliveryFuture()
        self.encoded: bytes | None = None
        self.raw = False
        self.count = 0  # messages in an already-encoded (raw) batch


class Producer:
    """Publishes messages to a cluster; see docs/client.md for every option."""

    def __init__(
        self,
        zk: str | None = None,
        brokers: Sequence[str] | None = None,
        *,
        acks: int | str = 1,
        linger_ms: float = 5,
        batch_bytes: int = 256 * 1024,
        batch_messages: int = 10_000,
        buffer_bytes: int = 64 * 1024 * 1024,
        block_timeout: float = 30.0,
        compression: str = "none",
        partitioner: str = "round_robin",
        retries: int | None = None,
        retry_backoff_ms: float = 100,
        delivery_timeout: float = 120.0,
        request_timeout: float = 30.0,
        max_request_bytes: int = 16 * 1024 * 1024,
        client_id: str = "",
    ):
        if acks == "all":
            acks = -1
        if acks not in (0, 1, -1) or isinstance(acks, bool):
            raise ConfigError("acks must be 0, 1 or 'all' (-1)")
        if compression not in records.CODECS:
            raise ConfigError(f"compression must be one of {sorted(records.CODECS)}")
        if partitioner not in ("round_robin", "random"):
            raise ConfigError("partitioner must be 'round_robin' or 'random'")
        if batch_messages < 1 or batch_bytes < 1 or buffer_bytes < 1:
            raise ConfigError("batch_messages, batch_bytes and buffer_bytes must be positive")
        self.acks = acks
        self.linger = linger_ms / 1000
        self.batch_bytes = batch_bytes
        self.batch_messages = batch_messages
        self.buffer_bytes = buffer_bytes
        self.block_timeout = block_timeout
        self.codec = records.CODECS[compression]
        self.partitioner = partitioner
        self.retries = retries
        self.retry_backoff = retry_backoff_ms / 1000
        self.delivery_timeout = delivery_timeout
        self.request_timeout = request_timeout
        self.max_request_bytes = max_request_bytes
        self.client_id = client_id
        self.cluster = Cluster(zk, brokers, request_timeout)
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)      # sender waits for work
        self._space = threading.Condition(self._lock)     # send() waits for buffer space
        self._queues: dict[tuple[str, int], deque[_Batch]] = {}
        self._in_flight: set[tuple[str, int]] = set()
        self._sent: dict[int, tuple[float, Any]] = {}  # id(future) -> (sent at, connection)
        self._retry_at: dict[tuple[str, int], float] = {}
        self._attempts: dict[tuple[str, int], int] = {}
        self._buffered = 0
        self._unfinished = 0  # batches created and not yet completed
        self._idle = threading.Condition(self._lock)
        self._flushing = 0
        self._sender_waiting = False
        self._closed = False
        self._round_robin: dict[str, Any] = {}
        self._partition_counts: dict[str, int] = {}
        """Partitions per topic, once learned: a topic's count never changes (the sender
        thread forgets leaders on every retry; send() must not go to the network then)."""
        self._stats = {"messages_sent": 0, "bytes_sent": 0, "batches_sent": 0,
                       "messages_acked": 0, "batches_failed": 0, "messages_failed": 0,
                       "retries": 0, "requests": 0}
        self._fatal: BaseException | None = None
        self._sender = threading.Thread(target=self._run_sender, name="logferry-sender", daemon=True)
        self._sender.start()

    # -- the public api -----------------------------------------------------------------

    def send(self, topic: str, messages: Values, key: bytes | None = None,
             partition: int | None = None, timestamp: int | None = None) -> DeliveryFuture:
        """Queue one message or a list of them for ``topic``.

        Blocks only while the buffer is full (up to ``block_timeout``, then raises
        BufferFullError), and the first time a topic is sent to, to learn its partition
        count (a metadata request, which may create the topic); from then on the brokers
        may all be down and messages are still queued. Returns the future of the batch
        holding the last message.
        """
        if isinstance(messages, (bytes, bytearray, memoryview, str)):
            values = [messages]
            nbytes = len(messages)
        else:
            values = messages if isinstance(messages, list) else list(messages)
            if not values:
                raise ValueError("send() needs at least one message")
            nbytes = sum(map(len, values))
        if timestamp is None:
            timestamp = int(time.time() * 1000)
        count = self._partition_counts.get(topic)
        if count is None:
            count = len(self.cluster.partitions_for(topic, create=True))
            self._partition_counts[topic] = count
        if partition is None:
            partition = self._choose_partition(topic, key, count)
        elif not 0 <= partition < count:
            raise UnknownTopicOrPartitionError(
                f"topic {topic!r} has partitions 0-{count - 1}, not {partition}")
        return self._append((topic, partition), values, nbytes, key, timestamp)

    def send_raw(self, topic: str, partition: int, batch: bytes | memoryview) -> DeliveryFuture:
        """Append already-encoded batches as they are (the mirror copies batches so).

        Only the headers are read here (to count messages); the broker checks every
        batch's CRC on append, so the bytes are not copied or checksummed twice.
        """
        data = batch if isinstance(batch, (bytes, memoryview)) else bytes(batch)
        _, count = records.count_messages(data)
        now = time.monotonic()
        with self._lock:
            self._check_open()
            self._wait_for_space(len(data))
            raw = _Batch(now)
            raw.encoded = data
            raw.raw = True
            raw.nbytes = len(data)
            raw.count = count
            queue = self._queues.setdefault((topic, partition), deque())
            queue.append(raw)
            self._buffered += raw.nbytes
            self._unfinished += 1
            self._notify_sender()
        return raw.future

    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued now and wait until it is acknowledged or failed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            self._flushing += 1
            try:
                self._notify_sender(force=True)
                while self._unfinished and self._fatal is None:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise RequestTimedOutError(
                            f"flush timed out with {self._unfinished} batches unacknowledged")
                    self._idle.wait(remaining if remaining is not None else 1.0)
            finally:
                self._flushing -= 1
        if self._fatal is not None:
            raise ProducerClosedError(f"producer's sender thread died: {self._fatal}")

    def close(self, timeout: float | None = None) -> None:
        """Flush, stop the sender thread and close the connections."""
        if self._closed:
            return
        try:
            self.flush(timeout)
        finally:
            with self._lock:
                self._closed = True
                self._notify_sender(force=True)
            self._sender.join(timeout=10)
            self._fail_all(ProducerClosedError("producer closed before delivery"))
            self.cluster.close()

    def metrics(self) -> dict[str, int]:
        """Counters since the producer started."""
        with self._lock:
            stats = dict(self._stats)
            stats["buffered_bytes"] = self._buffered
            stats["unfinished_batches"] = self._unfinished
        return stats

    def partitions(self, topic: str) -> list[int]:
        """Partition numbers of ``topic`` (the broker creates it if allowed)."""
        return sorted(self.cluster.partitions_for(topic, create=True))

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- accumulating -------------------------------------------------------------------

    def _choose_partition(self, topic: str, key: bytes | None, count: int) -> int:
        if key is not None:
            return zlib.crc32(key) % count
        if self.partitioner == "random":
            return random.randrange(count)
        counter = self._round_robin.get(topic)
        if counter is None:
            counter = self._round_robin[topic] = itertools.count(random.randrange(count))
        return next(counter) % count

    def _append(self, tp: tuple[str, int], values: list, nbytes: int, key: bytes | None,
                timestamp: int) -> DeliveryFuture:
        now = time.monotonic()
        with self._lock:
            self._check_open()
            self._wait_for_space(nbytes)
            queue = self._queues.get(tp)
            if queue is None:
                queue = self._queues[tp] = deque()
            batch = queue[-1] if queue else None
            if batch is None or batch.encoded is not None or batch.raw:
                batch = self._new_batch(queue, now)
            n = len(values)
            start = 0
            ready = False
            while start < n:
                room = self.batch_messages - len(batch.values)
                if room <= 0 or batch.nbytes >= self.batch_bytes:
                    batch = self._new_batch(queue, now)
                    ready = True
                    continue
                take = values[start:start + room] if (start or room < n) else values
                taken = len(take)
                if key is not None and batch.keys is None:
                    batch.keys = [None] * len(batch.values)
                batch.values += take
                batch.timestamps += [timestamp] * taken
                if batch.keys is not None:
                    batch.keys += [key] * taken
                batch.nbytes += nbytes if taken == n else sum(map(len, take))
                start += taken
            self._buffered += nbytes
            if ready or len(batch.values) >= self.batch_messages or batch.nbytes >= self.batch_bytes \
                    or self.linger <= 0:
                self._notify_sender()
            return batch.future

    def _new_batch(self, queue: deque, now: float) -> _Batch:
        batch = _Batch(now)
        queue.append(batch)
        self._unfinished += 1
        self._notify_sender()  # a sleeping sender must learn this batch's linger deadline
        return batch

    def _wait_for_space(self, nbytes: int) -> None:
        if self._buffered + nbytes <= self.buffer_bytes or self._buffered == 0:
            return
        deadline = time.monotonic() + self.block_timeout
        while self._buffered + nbytes > self.buffer_bytes and self._buffered:
            self._check_open()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BufferFullError(
                    f"producer buffer full ({self._buffered} of {self.buffer_bytes} bytes) for "
                    f"{self.block_timeout}s: the brokers are down or slower than the producer")
            self._notify_sender(force=True)
            self._space.wait(remaining)

    def _check_open(self) -> None:
        if self._closed:
            raise ProducerClosedError("producer is closed")
        if self._fatal is not None:
            raise ProducerClosedError(f"producer's sender thread died: {self._fatal}")

    def _notify_sender(self, force: bool = False) -> None:
        if self._sender_waiting or force:
            self._wake.notify()

    # -- the sender thread --------------------------------------------------------------

    def _run_sender(self) -> None:
        try:
            while True:
                drained = self._drain()
                if drained is None:
                    return
                if drained:
                    self._send_drained(drained)
        except BaseException as exc:  # fail loudly: every pending batch fails with it
            log.exception("producer sender thread crashed")
            with self._lock:
                self._fatal = exc
            self._fail_all(ProducerClosedError(f"producer sender thread crashed: {exc}"))

    def _drain(self) -> dict[tuple[str, int], list[_Batch]] | None:
        """Wait for ready partitions and take their batches; None when closing and idle."""
        with self._lock:
            while True:
                now = time.monotonic()
                drained: dict[tuple[str, int], list[_Batch]] = {}
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
                    if (len(queue) > 1 or age >= self.linger or self._flushing or self._closed
                            or first.raw or first.encoded is not None
                            or len(first.values) >= self.batch_messages
                            or first.nbytes >= self.batch_bytes):
                        drained[tp] = self._take(queue)
                        self._in_flight.add(tp)
                    else:
                        next_wake = min(next_wake, self.linger - age)
                if drained:
                    return drained
                self._expire_requests(now)
                if self._closed and not self._unfinished:
                    return None
                if self._closed and not self._in_flight and not any(self._queues.values()):
                    return None
                self._sender_waiting = True
                self._wake.wait(max(next_wake, 0.0005))
                self._sender_waiting = False

    def _expire_requests(self, now: float) -> None:
        """Close connections whose requests went unanswered past request_timeout (lock held).

        Closing fails every request pending on them, which retries their batches.
        """
        for key, (sent_at, conn) in list(self._sent.items()):
            if now - sent_at > self.request_timeout:
                del self._sent[key]
                log.warning("no answer from %s within %.0fs; reconnecting", conn.address,
                            self.request_timeout)
                threading.Thread(target=conn.close, daemon=True).start()

    def _take(self, queue: deque) -> list[_Batch]:
        """Pop the queue's oldest batches, up to ``max_request_bytes`` (at least one)."""
        taken = [queue.popleft()]
        size = taken[0].nbytes
        while queue and size + queue[0].nbytes <= self.max_request_bytes:
            batch = queue.popleft()
            taken.append(batch)
            size += batch.nbytes
        return taken

    def _send_drained(self, drained: dict[tuple[str, int], list[_Batch]]) -> None:
        by_broker: dict[tuple[str, int], list[tuple[tuple[str, int], list[_Batch]]]] = {}
        for tp, batches in drained.items():
            try:
                address = self.cluster.leader_address(*tp)
            except LogferryError as exc:
                self._retry_or_fail(tp, batches, exc)
                continue
            for batch in batches:
                if batch.encoded is None:
                    batch.encoded = records.encode_batch(batch.values, batch.keys,
                                                         batch.timestamps, self.codec)
            by_broker.setdefault(address, []).append((tp, batches))
        for address, parts in by_broker.items():
            # Split so no request exceeds max_request_bytes; a partition's batches stay
            # in one request, so each partition still has one request in flight.
            request: list = []
            size = 0
            for tp, batches in parts:
                part_size = sum(len(b.encoded) for b in batches)  # type: ignore[arg-type]
                if request and size + part_size > self.max_request_bytes:
                    self._send_request(address, request)
                    request, size = [], 0
                request.append((tp, batches))
                size += part_size
            if request:
                self._send_request(address, request)

    def _send_request(self, address: tuple[str, int],
                      parts: list[tuple[tuple[str, int], list[_Batch]]]) -> None:
        header_parts = []
        payload = []
        for (topic, partition), batches in parts:
            header_parts.append([topic, partition, sum(len(b.encoded) for b in batches)])  # type: ignore[arg-type]
            payload.extend(b.encoded for b in batches)
        try:
            conn = self.cluster.connection(address)
            future = conn.request(protocol.PRODUCE, {"acks": self.acks, "parts": header_parts},
                                  payload, expect_response=self.acks != 0,
                                  callback=lambda f: self._on_response(f, parts))
        except LogferryError as exc:
            for tp, batches in parts:
                self._retry_or_fail(tp, batches, exc)
            return
        with self._lock:
            self._stats["requests"] += 1
            if future is not None and not future.done():
                self._sent[id(future)] = (time.monotonic(), conn)
        if future is None:  # acks=0: written to the socket is all we learn
            for tp, batches in parts:
                self._complete(tp, batches, None)

    def _on_response(self, future: ResponseFuture,
                     parts: list[tuple[tuple[str, int], list[_Batch]]]) -> None:
        with self._lock:
            self._sent.pop(id(future), None)
        if future.error is not None:
            for tp, batches in parts:
                self._retry_or_fail(tp, batches, future.error)
            return
        header = future.frame.header  # type: ignore[union-attr]
        if header.get("err"):
            error = error_for_code(header["err"], header.get("msg", ""))
            for tp, batches in parts:
                self._retry_or_fail(tp, batches, error)
            return
        results = {(r[0], r[1]): r for r in header.get("parts", [])}
        for tp, batches in parts:
            result = results.get(tp)
            if result is None:
                self._retry_or_fail(tp, batches, BrokerNotAvailableError(
                    f"broker answered no result for {tp[0]}-{tp[1]}"))
            elif result[2]:
                self._retry_or_fail(tp, batches, error_for_code(result[2], result[4] or ""))
            else:
                self._complete(tp, batches, result[3])

    def _complete(self, tp: tuple[str, int], batches: list[_Batch], base: int | None) -> None:
        offset = base
        messages = sent_bytes = 0
        for batch in batches:
            messages += batch.count if batch.raw else len(batch.values)
            sent_bytes += batch.nbytes
            batch.future._complete(offset)
            if offset is not None:
                offset += len(batch.encoded)  # type: ignore[arg-type]
        with self._lock:
            self._in_flight.discard(tp)
            self._attempts.pop(tp, None)
            self._release(batches)
            stats = self._stats
            stats["messages_sent"] += messages
            stats["bytes_sent"] += sent_bytes
            stats["batches_sent"] += len(batches)
            if self.acks:
                stats["messages_acked"] += messages
            self._notify_sender(force=True)

    def _retry_or_fail(self, tp: tuple[str, int], batches: list[_Batch], error: LogferryError) -> None:
        now = time.monotonic()
        with self._lock:
            attempts = self._attempts.get(tp, 0) + 1
            expired = now - batches[0].created > self.delivery_timeout
            out_of_tries = self.retries is not None and attempts > self.retries
            if isinstance(error, UnknownTopicOrPartitionError):
                self._partition_counts.pop(tp[0], None)  # deleted (and made anew?): ask again
            if not error.retriable or expired or out_of_tries or self._closed:
                # Later batches of the partition fail too: a success must imply that
                # every earlier send to the partition succeeded (order is the promise).
                queue = self._queues.get(tp)
                if queue:
                    batches = batches + list(queue)
                    queue.clear()
                self._in_flight.discard(tp)
                self._attempts.pop(tp, None)
                self._release(batches)
                self._stats["batches_failed"] += len(batches)
                self._stats["messages_failed"] += sum(b.count if b.raw else len(b.values)
                                                      for b in batches)
                failed = True
            else:
                self._attempts[tp] = attempts
                self._stats["retries"] += 1
                queue = self._queues.setdefault(tp, deque())
                queue.extendleft(reversed(batches))  # keep the partition's order
                self._in_flight.discard(tp)
                backoff = min(self.retry_backoff * (2 ** min(attempts - 1, 6)), 5.0)
                self._retry_at[tp] = now + random.uniform(backoff / 2, backoff)
                failed = False
            self._notify_sender(force=True)
        if failed:
            if not isinstance(error, ProducerClosedError):
                log.error("giving up on %d batches for %s-%d: %s", len(batches), tp[0], tp[1], error)
            for batch in batches:
                batch.future._complete(None, error)
        else:
            log.info("retrying %s-%d after: %s", tp[0], tp[1], error)
            self.cluster.forget(tp[0])

    def _release(self, batches: Iterable[_Batch]) -> None:
        """Free buffer space of finished batches (lock held)."""
        for batch in batches:
            self._buffered -= batch.nbytes
            self._unfinished -= 1
        self._space.notify_all()
        if not self._unfinished:
            self._idle.notify_all()

    def _fail_all(self, error: LogferryError) -> None:
        with self._lock:
            leftovers = [b for q in self._queues.values() for b in q]
            for queue in self._queues.values():
                queue.clear()
            self._release(leftovers)
        for batch in leftovers:
            batch.future._complete(None, error)
