"""The group consumer's fetcher: one multi-partition FETCH per broker, pipelined.

One background thread. Each round it groups the owned partitions that may be fetched
(active, no request outstanding, not backing off, their stream's queue under its byte
bound) by the broker hosting them, and sends each broker one FETCH naming all of them
(long poll: ``min_bytes=1``, ``max_wait_ms``). Requests to different brokers are in
flight at the same time; a broker gets its next request once it answered the last, so
one slow or dead broker never holds up the others. With ``requests_per_broker`` above 1
(the mirror, reading across a WAN) up to that many requests per broker are in flight,
each for a different share of its partitions (a partition is still in one request at a
time): a partition's next fetch then waits only for its own answer, not for the other
partitions' bytes, so round trips overlap with transfers. With a
:class:`broker.client.group.window.FetchWindow` (``fetch_window_bytes``) the bytes asked
per partition follow each broker's measured bandwidth x latency (the connection stamps
when each answer's first bytes arrived), so a long round trip does not cap the rate
(bounded per broker). Responses are decoded in this
thread (one msgpack call per batch, CRC-checked) and queued as :class:`Chunk` objects
for the application.

Per-partition outcomes:

- data: queue the batches, advance the fetch offset past the whole batches;
- a batch larger than the fetch size: grow that partition's fetch size and retry
  (never stall on a big batch);
- ``NotLeader`` / ``UnknownTopicOrPartition`` / an unreachable broker: forget the
  topic's metadata and retry with backoff and jitter;
- ``OffsetOutOfRange``: below the log start (retention deleted it), reset to earliest
  or latest per the ``start`` policy; past the log end (the log was truncated after a
  crash) reset to the end, since what follows it is new data. Either way it logs a
  warning naming the offsets, because messages were skipped or will repeat.

A partition whose start position is unknown (no committed offset) is resolved first
with an OFFSETS request per the ``start`` policy; the coordinator is then asked to
commit it at once, so a new group at ``latest`` does not move its start if it
restarts before its first regular commit.

Raw mode (``raw_batches=True``, for pipes of batches such as the mirror): batches are
CRC-checked but not decoded, and each chunk carries one :class:`RawBatch`. An
``on_gap(topic, partition, offset, log_start)`` hook, when given, decides what a gap
left by retention does: True resets as above, False halts the partition (no more
fetches for it until it is started again) so nothing is skipped silently.

Lifecycle: :meth:`Fetcher.start` starts the thread; if it dies, :meth:`GroupState.fail`
makes every reader raise; :meth:`Fetcher.close` stops it and abandons (closes) the
requests still outstanding.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

from broker.client.connection import Connection, ResponseFuture
from broker.client.consumer import Message, SimpleConsumer, messages_of
from broker.client.group.streams import Chunk, GroupState, PartitionState, RawBatch
from broker.client.group.window import MAX_ANSWER_BYTES, FetchWindow, Ticket
from broker.common.errors import (
    CorruptBatchError,
    LeaderNotAvailableError,
    LogferryError,
    NotLeaderError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
    error_for_code,
)
from broker.common.retry import Retry
from broker.wire import protocol, records
from broker.wire.fetch import (
    FetchAnswerPart,
    FetchPart,
    encode_fetch_request,
    parse_fetch_answer,
    payload_slices,
)

log = logging.getLogger("logferry.group.fetcher")

RETRY = Retry(initial=0.1, maximum=2.0, jitter=0.5)
"""Backoff of a partition after failed fetches: 0.1 s after the first, doubling per
further failure up to 2 s, jittered down to half so members do not retry in step."""
IDLE_WAIT = 0.5
"""Longest the fetcher sleeps when it has nothing to do (it is woken earlier)."""


class _Request(NamedTuple):
    address: tuple[str, int]
    slot: int
    """Which of the broker's ``requests_per_broker`` request slots it uses."""
    connection: Connection
    future: ResponseFuture
    parts: list[tuple[PartitionState, int, int]]
    """(state, epoch, offset) per part, in request order."""
    deadline: float
    ticket: Ticket | None
    """The window's note of when it went out (None without a window)."""


class Fetcher:
    """Fetches owned partitions into their stream queues (module docstring)."""

    def __init__(
        self,
        state: GroupState,
        simple: SimpleConsumer,
        start_policy: str,
        max_wait_ms: int,
        request_timeout: float,
        on_resolved: Callable[[], None] | None = None,
        raw_batches: bool = False,
        on_gap: Callable[[str, int, int, int], bool] | None = None,
        requests_per_broker: int = 1,
        window: FetchWindow | None = None,
    ):
        self.state = state
        self.window = window
        """Adapts the bytes asked per partition to each broker's rate x latency (or None)."""
        self._answered_at: dict[int, float] = {}
        """id(future) -> when its response arrived (stamped by the reader thread)."""
        self.requests_per_broker = requests_per_broker
        self.raw_batches = raw_batches
        self.on_gap = on_gap
        self.simple = simple
        self.cluster = simple.cluster
        self.start_policy = start_policy
        self.max_wait_ms = max_wait_ms
        self.request_timeout = request_timeout
        self.on_resolved = on_resolved
        self._inflight: dict[tuple[tuple[str, int], int], _Request] = {}
        """(broker address, slot) -> its outstanding request."""
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="logferry-group-fetcher", daemon=True)
        self.stats = {
            "fetch_requests": 0,
            "fetch_errors": 0,
            "bytes_fetched": 0,
            "messages_fetched": 0,
            "offset_resets": 0,
        }

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def close(self, timeout: float = 5.0) -> None:
        """Stop the thread; outstanding requests are abandoned."""
        with self.state.lock:
            self._stopping = True
            self.state.fetch_wake.notify_all()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)
        with self.state.lock:
            for request in self._inflight.values():
                for ps, _, _ in request.parts:
                    ps.in_flight = False
            self._inflight.clear()
            self._answered_at.clear()
            self.state.acked.notify_all()

    def refresh_metadata(self) -> None:
        """Brokers changed: re-resolve every partition's broker before its next fetch."""
        with self.state.lock:
            topics = {ps.topic for ps in self.state.partitions.values()}
            for ps in self.state.partitions.values():
                ps.address = None
                ps.retry_at = 0.0
            self.state.fetch_wake.notify_all()
        for topic in topics:
            self.cluster.forget(topic)

    # -- the loop --------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # a bug here must not leave readers waiting forever
            log.exception("group fetcher thread died")
            self.state.fail(exc)

    def _loop(self) -> None:
        state = self.state
        while True:
            with state.lock:
                if self._stopping or state.closed:
                    return
                now = time.monotonic()
                done = [r for r in self._inflight.values() if r.future.done() or now >= r.deadline]
                for request in done:
                    del self._inflight[request.address, request.slot]
                ready = [] if state.paused else [ps for ps in state.partitions.values() if self._fetchable(ps, now)]
            for request in done:
                self._complete(request)
            sent = self._send_ready(ready) if ready else False
            with state.lock:
                if self._stopping or state.closed:
                    return
                if done or sent or any(r.future.done() for r in self._inflight.values()):
                    continue
                state.fetch_wake.wait(self._idle_timeout())

    def _fetchable(self, ps: PartitionState, now: float) -> bool:
        return ps.active and not ps.in_flight and ps.retry_at <= now and ps.stream.nbytes < self.state.queue_bytes

    def _idle_timeout(self) -> float:
        """Sleep until the earliest backoff ends or a request times out (lock held)."""
        now = time.monotonic()
        wake = now + IDLE_WAIT
        for ps in self.state.partitions.values():
            if ps.active and not ps.in_flight and ps.retry_at > now:
                wake = min(wake, ps.retry_at)
        for request in self._inflight.values():
            wake = min(wake, request.deadline)
        return max(wake - now, 0.001)

    # -- sending -----------------------------------------------------------------------------

    def _send_ready(self, ready: list[PartitionState]) -> bool:
        unresolved = [ps for ps in ready if ps.fetch_offset is None]
        if unresolved:
            self._resolve_starts(unresolved)
        by_address: dict[tuple[str, int], list[PartitionState]] = {}
        for ps in ready:
            if ps.fetch_offset is None:
                continue
            address = ps.address
            if address is None:
                try:
                    address = self.cluster.leader_address(ps.topic, ps.partition)
                except Exception as exc:  # LogferryError, or kazoo's while ZooKeeper is away
                    self._part_failed(ps, ps.epoch, f"no broker for it: {exc}")
                    continue
                ps.address = address
            by_address.setdefault(address, []).append(ps)
        sent = False
        for address, states in by_address.items():
            free = [slot for slot in range(self.requests_per_broker) if (address, slot) not in self._inflight]
            for i, slot in enumerate(free[: len(states)]):  # the ready ones, shared out
                sent = self._send(address, states[i :: min(len(free), len(states))], slot) or sent
        return sent

    def _send(self, address: tuple[str, int], states: list[PartitionState], slot: int = 0) -> bool:
        parts: list[tuple[PartitionState, int, int]] = []
        fields_parts: list[FetchPart] = []
        window = self.window
        with self.state.lock:
            now = time.monotonic()
            size = 0
            if window is not None:
                fetched = sum(1 for ps in self.state.partitions.values() if ps.active and ps.address == address)
                # the request's partitions share one answer's bound (window.MAX_ANSWER_BYTES)
                size = min(window.size(address, fetched), max(window.base, MAX_ANSWER_BYTES // max(len(states), 1)))
            for ps in states:
                if not self._fetchable(ps, now) or ps.fetch_offset is None:
                    continue  # stopped or re-targeted while we resolved addresses
                ps.in_flight = True
                parts.append((ps, ps.epoch, ps.fetch_offset))
                fields_parts.append(FetchPart(ps.topic, ps.partition, ps.fetch_offset, max(ps.max_bytes, size)))
        if not parts:
            return False
        fields = encode_fetch_request(fields_parts, self.max_wait_ms, 1)
        try:
            connection = self.cluster.connection(address)
            future = connection.request(protocol.FETCH, fields)
            assert future is not None
        except LogferryError as exc:
            for topic in {ps.topic for ps, _, _ in parts}:
                self.cluster.forget(topic)
            self._parts_failed(parts, f"broker {address[0]}:{address[1]}: {exc}")
            return False
        now = time.monotonic()
        deadline = now + self.max_wait_ms / 1000 + self.request_timeout
        with self.state.lock:
            ticket = window.sent(address, now, size) if window is not None else None
            self._inflight[address, slot] = _Request(address, slot, connection, future, parts, deadline, ticket)
        self.stats["fetch_requests"] += 1
        future.callback = self._on_response
        return True

    def _on_response(self, future: ResponseFuture) -> None:
        # Runs on the connection's reader thread: only note the time and wake the fetcher.
        with self.state.lock:
            if self.window is not None:
                self._answered_at[id(future)] = time.monotonic()
            self.state.fetch_wake.notify_all()

    # -- receiving ---------------------------------------------------------------------------

    def _complete(self, request: _Request) -> None:
        future = request.future
        answered_at = self._answered_at.pop(id(future), None) if self.window is not None else None
        if not future.done():
            if self.window is not None:
                with self.state.lock:
                    self.window.forget(request.address)
            request.connection.close()  # a hung broker: start afresh next time
            waited = self.max_wait_ms / 1000 + self.request_timeout
            self._parts_failed(
                request.parts, f"no fetch response from {request.connection.address} within {waited:.0f}s"
            )
            return
        try:
            frame = future.result(0)
            results = parse_fetch_answer(frame.header)
            data = payload_slices(results, frame.payload)
        except LogferryError as exc:
            self._parts_failed(request.parts, str(exc))
            return
        if self.window is not None and request.ticket is not None:
            with self.state.lock:
                half = request.ticket.asked // 2
                self.window.answered(
                    request.ticket,
                    sum(len(d) for d in data),
                    any(len(d) >= half for d in data),
                    answered_at if answered_at is not None else time.monotonic(),
                    future.first_byte_at,
                    future.after_idle,
                )
        # zip without strict=: results may be shorter than parts (handled below); per fetch
        for (ps, epoch, offset), result, part_data in zip(request.parts, results, data):  # noqa: B905
            self._handle_part(ps, epoch, offset, result, part_data)
        if len(results) < len(request.parts):
            self._parts_failed(request.parts[len(results) :], "broker answered fewer parts than asked")

    def _handle_part(
        self, ps: PartitionState, epoch: int, offset: int, result: FetchAnswerPart, data: memoryview
    ) -> None:
        start, end = result.start, result.visible_end
        if result.error:
            self._part_error(ps, epoch, offset, error_for_code(result.error, result.message or ""), start, end)
            return
        with self.state.lock:
            stale = ps.epoch != epoch or ps.fetch_offset != offset
        if stale:
            self._finish(ps, epoch)
            return
        try:
            batches, used = raw_batches(data, offset) if self.raw_batches else records.decode_batches(data, offset)
        except CorruptBatchError as exc:
            log.error("%s-%d: corrupt data fetched at offset %d (%s); retrying", ps.topic, ps.partition, offset, exc)
            self._part_failed(ps, epoch, str(exc))
            return
        if not batches and len(data) >= records.LENGTH_SIZE:
            needed = records.batch_length_at(data)
            grown = min(max(needed, ps.max_bytes * 2), records.MAX_BATCH_BYTES + records.LENGTH_SIZE)
            log.info(
                "%s-%d: batch at offset %d needs %d bytes, more than the fetch size %d; fetching %d bytes",
                ps.topic,
                ps.partition,
                offset,
                needed,
                ps.max_bytes,
                grown,
            )
            with self.state.lock:
                ps.max_bytes = grown
        chunks = self._chunks(ps, epoch, offset, batches)
        with self.state.lock:
            ps.in_flight = False
            if start is not None:
                ps.log_start = start
            if end is not None:
                ps.log_end = end
            if ps.epoch != epoch or ps.fetch_offset != offset:
                self._notify_idle()
                return
            ps.failures = 0
            ps.fetch_offset = offset + used
            if chunks:
                queue = ps.stream
                for chunk in chunks:
                    queue.chunks.append(chunk)
                    queue.nbytes += chunk.nbytes
                self.state.data_ready.notify_all()
            self._notify_idle()
        if used:
            self.stats["bytes_fetched"] += used
            # The batches are RawBatch exactly when self.raw_batches (see the decode above).
            self.stats["messages_fetched"] += sum(
                b.count if isinstance(b, RawBatch) else len(b.values) for b in batches
            )

    def _chunks(
        self, ps: PartitionState, epoch: int, offset: int, batches: Sequence[RawBatch] | Sequence[records.Batch]
    ) -> list[Chunk]:
        skip_at = ps.skip_at
        chunks = []
        for batch in batches:
            start = 0
            if skip_at is not None and batch.offset == skip_at[0]:
                start = skip_at[1]
            messages: list[Message]
            if isinstance(batch, RawBatch):  # exactly when self.raw_batches
                # A batch is one item: a resumed (offset, skip) position re-delivers it whole.
                # Chunk.messages then holds that RawBatch, which Reader.poll_batches hands out.
                messages, start = [batch], 0  # type: ignore[list-item]
            else:
                messages = list(messages_of(ps.topic, ps.partition, batch))
            if start >= len(messages):
                start = len(messages)  # all processed: nothing to deliver, position moves on
            chunks.append(
                Chunk(ps, epoch, batch.offset, batch.next_offset, messages, start, batch.next_offset - batch.offset)
            )
        if batches and skip_at is not None:
            with self.state.lock:
                if ps.epoch == epoch and ps.skip_at == skip_at:
                    ps.skip_at = None
        # A chunk with nothing left to deliver still has to move the position past it.
        spent = [c for c in chunks if c.start >= len(c.messages)]
        if spent:
            with self.state.lock:
                if ps.epoch == epoch:
                    ps.position = spent[-1].position_after(len(spent[-1].messages))
            chunks = [c for c in chunks if c.start < len(c.messages)]
        return chunks

    # -- errors ------------------------------------------------------------------------------

    def _part_error(
        self, ps: PartitionState, epoch: int, offset: int, error: LogferryError, start: int | None, end: int | None
    ) -> None:
        if isinstance(error, OffsetOutOfRangeError) and (start is None or end is None):
            log.warning(
                "%s-%d: offset %d is out of range; resolving %s again",
                ps.topic,
                ps.partition,
                offset,
                self.start_policy,
            )
            with self.state.lock:
                ps.in_flight = False
                if ps.epoch == epoch and ps.fetch_offset == offset:
                    ps.fetch_offset = None
                    ps.skip_at = None
                self._notify_idle()
            return
        if isinstance(error, OffsetOutOfRangeError):
            assert start is not None and end is not None
            if offset < start and self.on_gap is not None and not self.on_gap(ps.topic, ps.partition, offset, start):
                log.error(
                    "%s-%d: offset %d was deleted by retention (log starts at %d); the "
                    "partition is halted, nothing skipped",
                    ps.topic,
                    ps.partition,
                    offset,
                    start,
                )
                with self.state.lock:
                    ps.in_flight = False
                    if ps.epoch == epoch:
                        ps.retry_at = float("inf")  # until the partition is started again
                    self._notify_idle()
                return
            if offset > end:
                target, why = end, "past the log end (the log was truncated); resuming at the end"
            elif self.start_policy == "latest":
                target, why = end, "below the log start (deleted by retention); start=latest"
            else:
                target, why = start, "below the log start (deleted by retention); start=earliest"
            log.warning(
                "%s-%d: offset %d is out of range [%d, %d]: %s, offset %d. Messages were skipped or will repeat.",
                ps.topic,
                ps.partition,
                offset,
                start,
                end,
                why,
                target,
            )
            self.stats["offset_resets"] += 1
            with self.state.lock:
                ps.in_flight = False
                if ps.epoch == epoch and ps.fetch_offset == offset:
                    ps.fetch_offset = target
                    ps.skip_at = None
                    if ps.position is not None and ps.position[0] == offset:
                        ps.position = (target, 0)
                self._notify_idle()
            return
        if isinstance(error, (NotLeaderError, LeaderNotAvailableError, UnknownTopicOrPartitionError)):
            self.cluster.forget(ps.topic)
        self._part_failed(ps, epoch, str(error))

    def _parts_failed(self, parts: list[tuple[PartitionState, int, int]], why: str) -> None:
        for ps, epoch, _ in parts:
            self._part_failed(ps, epoch, why)

    def _part_failed(self, ps: PartitionState, epoch: int, why: str) -> None:
        self.stats["fetch_errors"] += 1
        with self.state.lock:
            ps.in_flight = False
            if ps.epoch == epoch:
                ps.failures += 1
                ps.address = None
                ps.retry_at = time.monotonic() + RETRY.delay(ps.failures)
                failures = ps.failures
            else:
                failures = 0
            self._notify_idle()
        if failures:
            level = logging.WARNING if failures in (1, 10) or failures % 50 == 0 else logging.DEBUG
            log.log(level, "fetching %s-%d failed (%d in a row): %s", ps.topic, ps.partition, failures, why)

    def _finish(self, ps: PartitionState, epoch: int) -> None:
        with self.state.lock:
            ps.in_flight = False
            self._notify_idle()

    def _notify_idle(self) -> None:
        if self.state.ack_waiters:
            self.state.acked.notify_all()

    # -- start positions ---------------------------------------------------------------------

    def _resolve_starts(self, states: list[PartitionState]) -> None:
        resolved = False
        for ps in states:
            with self.state.lock:
                epoch = ps.epoch
            try:
                offset = self.simple.resolve_start(ps.topic, ps.partition, self.start_policy)
            except Exception as exc:
                self._part_failed(ps, epoch, f"cannot resolve start ({self.start_policy}): {exc}")
                continue
            with self.state.lock:
                if ps.epoch == epoch and ps.fetch_offset is None:
                    ps.fetch_offset = offset
                    ps.position = (offset, 0)
                    resolved = True
            log.info(
                "%s-%d: no committed offset, starting at %s = %d", ps.topic, ps.partition, self.start_policy, offset
            )
        if resolved and self.on_resolved is not None:
            self.on_resolved()

    def outstanding(self) -> int:
        """Requests in flight (for metrics)."""
        return len(self._inflight)


def raw_batches(data: memoryview, offset: int) -> tuple[list[RawBatch], int]:
    """The whole, CRC-checked batches of ``data`` (log bytes from ``offset``), undecoded.

    Returns them and the bytes they cover; a torn last batch is left for the next fetch.
    """
    checked = records.scan(data)
    rest = len(data) - checked.valid_bytes
    if checked.error is not None and rest >= records.HEADER_SIZE:
        length, magic = records.BATCH_HEADER.unpack_from(data, checked.valid_bytes)[:2]
        whole = records.LENGTH_SIZE + length <= rest  # complete yet invalid: not just cut off
        if (
            whole
            or magic not in records.MIN_LENGTH
            or not records.MIN_LENGTH[magic] <= length <= records.MAX_BATCH_BYTES
        ):
            raise CorruptBatchError(f"batch at offset {offset + checked.valid_bytes}: {checked.error}")
    out = []
    for pos, raw in records.iter_raw_batches(data[: checked.valid_bytes]):
        count = records.BATCH_HEADER.unpack_from(raw)[4]
        out.append(RawBatch(offset + pos, offset + pos + len(raw), count, raw))
    return out, checked.valid_bytes


__all__ = ["Fetcher", "raw_batches"]
