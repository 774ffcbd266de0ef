"""The producer's sender thread: ready batches -> produce requests -> outcomes.

Each round the sender takes the ready batches from the :class:`Accumulator`, encodes
each in one msgpack call (once: a retried batch keeps its bytes), groups them by the
broker leading their partition into one produce request per broker
(:func:`plan_requests` splits requests at ``max_request_bytes``), and pipelines those
requests without waiting for answers. Answers arrive on the connections' reader
threads, which complete the batches' futures or hand the batches back to the
accumulator for a retry, as the :class:`RetryPolicy` decides.

A request unanswered for ``request_timeout`` closes its connection, which fails every
request pending on it, so their batches are retried on a fresh connection. Sooner than
that, a request unanswered for a second has its partitions' leaders looked up again
(:mod:`.leader_check`): where another broker leads now, its connection is closed the
same way and its batches go to the new leader.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterable
from itertools import accumulate
from operator import attrgetter
from typing import Any

from broker.client.accumulator import Accumulator, Drained, ProducerBatch, TopicPartition
from broker.client.cluster import Cluster
from broker.client.connection import ResponseFuture
from broker.client.delivery import complete_many
from broker.client.idempotence import ProducerSequences
from broker.client.leader_check import CHECK_AFTER_S, Address, LeaderCheck, PendingRequest
from broker.common.errors import (
    AuthorizationError,
    BrokerNotAvailableError,
    LogferryError,
    ProducerClosedError,
    ProducerFencedError,
    UnknownTopicOrPartitionError,
    UnsupportedApiError,
    error_for_code,
)
from broker.common.retry import Retry
from broker.wire import protocol
from broker.wire.produce import parse_produce_answer
from broker.wire.producer_id import parse_init_producer_id_answer

log = logging.getLogger("logferry.producer")

Part = tuple[TopicPartition, list[ProducerBatch]]
"""One partition's batches in a request (they stay together: one request per partition)."""

EXPIRE_CHECK_S = 0.5
"""How often, at most, unanswered requests are looked for while batches keep coming."""

STAT_NAMES = (
    "messages_sent",
    "bytes_sent",
    "batches_sent",
    "messages_acked",
    "batches_failed",
    "messages_failed",
    "retries",
    "requests",
)


class RetryPolicy:
    """Whether a failed send is tried again, and after how long.

    A batch is retried while its error is retriable, it is younger than
    ``delivery_timeout``, the partition's attempts stay within ``retries`` (None: no
    limit) and the producer is not closing. The backoff (a :class:`Retry`) doubles per
    attempt from ``backoff`` up to 64 times it and at most ``max_backoff``, with jitter
    (uniform in its upper half) so producers that failed together do not retry together.
    """

    def __init__(
        self,
        retries: int | None,
        backoff: float,
        delivery_timeout: float,
        max_backoff: float = 5.0,
        rng: Callable[[], float] = random.random,
    ):
        self.retries = retries
        self.backoff = backoff
        self.delivery_timeout = delivery_timeout
        self.max_backoff = max_backoff
        first = max(backoff, 0.0)
        self._backoff = Retry(initial=first, maximum=min(first * 2**6, max_backoff), jitter=0.5, rng=rng)

    def should_retry(self, error: LogferryError, attempts: int, age: float, closing: bool) -> bool:
        """``attempts`` counts this failure; ``age`` is the oldest batch's age in seconds."""
        if not error.retriable or closing or age > self.delivery_timeout:
            return False
        return self.retries is None or attempts <= self.retries

    def delay(self, attempts: int) -> float:
        """Seconds to wait before attempt ``attempts + 1``."""
        return self._backoff.delay(attempts)


def plan_requests(
    parts: list[tuple[TopicPartition, list[ProducerBatch], int]], max_request_bytes: int
) -> list[list[Part]]:
    """Split one broker's parts into requests of at most ``max_request_bytes``.

    ``parts`` are ``(tp, batches, encoded size)``. A partition's batches stay in one
    request, so each partition still has one request in flight; a single part larger
    than the limit is a request of its own.
    """
    requests: list[list[Part]] = []
    request: list[Part] = []
    size = 0
    for tp, batches, part_size in parts:
        if request and size + part_size > max_request_bytes:
            requests.append(request)
            request, size = [], 0
        request.append((tp, batches))
        size += part_size
    if request:
        requests.append(request)
    return requests


class Sender:
    """Moves batches from the accumulator to the brokers; run :meth:`run` in a thread."""

    def __init__(
        self,
        accumulator: Accumulator,
        cluster: Cluster,
        *,
        acks: int,
        codec: int,
        request_timeout: float,
        max_request_bytes: int,
        retry: RetryPolicy,
        on_unknown_topic: Callable[[str], None] = lambda topic: None,
        clock: Callable[[], float] = time.monotonic,
        idempotent: bool = False,
    ):
        self.accumulator = accumulator
        self.cluster = cluster
        self.acks = acks
        self.codec = codec
        self.request_timeout = request_timeout
        self.max_request_bytes = max_request_bytes
        self.retry = retry
        self.on_unknown_topic = on_unknown_topic
        """Called when a partition's topic is unknown (deleted, or made anew?): ask again."""
        self.clock = clock
        self.sequences = ProducerSequences() if idempotent else None
        """The idempotent producer's id and sequences (:mod:`.idempotence`); None: off."""
        self._lock = threading.Lock()  # guards the fields below; never held across IO
        self._sent: dict[int, tuple[float, Any, Address, list[Part]]] = {}
        """Requests unanswered: id(future) -> (sent at, connection, address, parts); a
        plain tuple, made per request (a PendingRequest only for the leader check)."""
        self.leader_check = LeaderCheck(cluster, self._leader_moved, clock)
        self._attempts: dict[TopicPartition, int] = {}
        self._stats = dict.fromkeys(STAT_NAMES, 0)

    def metrics(self) -> dict[str, int]:
        """Counters since the sender started."""
        with self._lock:
            return dict(self._stats)

    # -- the loop --------------------------------------------------------------------------

    def run(self) -> None:
        """Send until the accumulator is closed and empty; a crash fails every batch loudly."""
        acc = self.accumulator
        checked = self.clock()
        try:
            while True:
                drained = acc.next_ready()
                if drained is None:
                    return
                if drained:
                    self.send(drained)
                now = self.clock()
                if not drained or now - checked >= EXPIRE_CHECK_S:
                    checked = now
                    self._expire_requests(now)
        except BaseException as exc:
            log.exception("producer sender thread crashed")
            acc.set_fatal(exc)
            _fail_futures(acc.abort_all(), ProducerClosedError(f"producer sender thread crashed: {exc}"))

    def send_direct(self, drained: Drained) -> None:
        """:meth:`send` in the thread that appended (``Accumulator.direct``): the same
        encoding, requests and outcomes; a crash fails every batch as in :meth:`run`,
        and the caller's future carries the error. Only over open connections to
        cached leaders: anything needing the network first (metadata, a connect) is
        given back to the sender thread, so ``send()`` never waits for it."""
        opened = self.cluster.open_connection
        if not all(opened(*tp) for tp in drained):
            self.accumulator.give_back(drained)
            return
        try:
            self.send(drained)
        except Exception as exc:
            log.exception("producer send failed")
            acc = self.accumulator
            acc.set_fatal(exc)
            _fail_futures(acc.abort_all(), ProducerClosedError(f"producer send failed: {exc}"))

    def _expire_requests(self, now: float) -> None:
        """Close connections whose requests went unanswered past request_timeout.

        Closing fails every request pending on them, which retries their batches.
        """
        with self._lock:
            expired = [(key, r[1]) for key, r in self._sent.items() if now - r[0] > self.request_timeout]
            for key, _ in expired:
                del self._sent[key]
            waiting = [
                PendingRequest(key, sent_at, conn, address, [tp for tp, _ in parts])
                for key, (sent_at, conn, address, parts) in self._sent.items()
                if now - sent_at > CHECK_AFTER_S
            ]
        for _, conn in expired:
            log.warning("no answer from %s within %.0fs; reconnecting", conn.address, self.request_timeout)
            threading.Thread(target=conn.close, daemon=True).start()
        if waiting:
            self.leader_check.poll(waiting, now)

    def _leader_moved(self, request: PendingRequest, tp: TopicPartition, leader: Address) -> None:
        """A waiting request's partition is led elsewhere now (:mod:`.leader_check`):
        close its connection, failing (and so retrying) what is pending on it."""
        conn = request.connection
        with self._lock:
            if request.key not in self._sent:
                return  # answered meanwhile, or its connection already closed
            for key in [key for key, r in self._sent.items() if r[1] is conn]:
                del self._sent[key]
        conn.close()

    def send(self, drained: Drained) -> None:
        """Encode the drained batches and send one request per broker (split by size)."""
        by_broker: dict[tuple[str, int], list[tuple[TopicPartition, list[ProducerBatch], int]]] = {}
        codec = self.codec
        if self.sequences is not None and self.sequences.needs_id and not self._init_producer_id(drained):
            return
        sequences = self.sequences
        for tp, batches in drained.items():
            try:
                address = self.cluster.leader_address(*tp)
            except LogferryError as exc:
                self.retry_or_fail(tp, batches, exc)
                continue
            # encode once here (a retried batch keeps its bytes); per batch, so inline
            pool = self.accumulator.buffers
            for b in batches:
                if b.encoded is None:
                    if sequences is not None:  # numbered once, at encode
                        b.encode(codec, pool, sequences.assign(tp, len(b.values)))
                    else:
                        b.encode(codec, pool)
            size = sum(map(len, map(_encoded_of, batches)))
            by_broker.setdefault(address, []).append((tp, batches, size))
        for address, parts in by_broker.items():
            for request in plan_requests(parts, self.max_request_bytes):
                self._send_request(address, request)

    def _init_producer_id(self, drained: Drained) -> bool:
        """Get a producer id from any broker; on failure retry (or fail) every drained
        partition as a failed send would. Returns True once the producer has an id."""
        try:
            frame = self.cluster.call_any(protocol.INIT_PRODUCER_ID, {})
            answer = parse_init_producer_id_answer(frame.header)
        except UnsupportedApiError:
            # A broker from before idempotence (a cluster being upgraded): send plain
            # batches, which every broker reads, rather than fail every send.
            log.warning(
                "the brokers do not give out producer ids (api %d): this producer "
                "sends without idempotence; retries may duplicate",
                protocol.INIT_PRODUCER_ID,
            )
            self.sequences = None
            return True
        except LogferryError as exc:
            for tp, batches in drained.items():
                self.retry_or_fail(tp, batches, exc)
            return False
        assert self.sequences is not None
        self.sequences.set_id(answer.producer_id, answer.epoch)
        log.info("idempotent producer: id %d, epoch %d", answer.producer_id, answer.epoch)
        return True

    def _send_request(self, address: tuple[str, int], parts: list[Part]) -> None:
        header_parts: list[list[Any]] = []
        payload: list[bytes | memoryview] = []
        copies: list[int] = []
        for (topic, partition), batches in parts:
            encoded = list(map(_encoded_of, batches))  # each encoded by send()
            if batches[0].raw and all(b.raw for b in batches):
                copies.append(len(header_parts))  # send_raw's: copies, never refused for a gap
            header_parts.append([topic, partition, sum(map(len, encoded))])
            payload.extend(encoded)
        fields: dict[str, Any] = {"acks": self.acks, "parts": header_parts}
        if copies:
            fields["copies"] = copies
        try:
            conn = self.cluster.connection(address)
            future = conn.request(
                protocol.PRODUCE,
                fields,
                payload,
                expect_response=self.acks != 0,
                callback=lambda f: self._on_response(f, parts),
            )
        except LogferryError as exc:
            for tp, batches in parts:
                self.retry_or_fail(tp, batches, exc)
            return
        with self._lock:
            self._stats["requests"] += 1
            if future is not None and not future.done():
                self._sent[id(future)] = (self.clock(), conn, address, parts)
        if future is None:  # acks=0: written to the socket is all we learn
            for tp, batches in parts:
                self.delivered(tp, batches, None)

    def _on_response(self, future: ResponseFuture, parts: list[Part]) -> None:
        with self._lock:
            self._sent.pop(id(future), None)
        if future.error is not None:
            for tp, batches in parts:
                self.retry_or_fail(tp, batches, future.error)
            return
        header = future.frame.header  # type: ignore[union-attr]
        if header.get("err"):
            error = error_for_code(header["err"], header.get("msg", ""))
            for tp, batches in parts:
                self.retry_or_fail(tp, batches, error)
            return
        try:
            results = {(r.topic, r.partition): r for r in parse_produce_answer(header)}
        except LogferryError as exc:
            for tp, batches in parts:
                self.retry_or_fail(tp, batches, exc)
            return
        for tp, batches in parts:
            result = results.get(tp)
            if result is None:
                self.retry_or_fail(
                    tp, batches, BrokerNotAvailableError(f"broker answered no result for {tp[0]}-{tp[1]}")
                )
            elif result.error:
                self.retry_or_fail(tp, batches, error_for_code(result.error, result.message or ""))
            else:
                self.delivered(tp, batches, result.base_offset)

    # -- outcomes --------------------------------------------------------------------------

    def delivered(self, tp: TopicPartition, batches: list[ProducerBatch], base: int | None) -> None:
        """Complete the batches' futures (offsets from ``base``) and free their space."""
        messages = sent_bytes = 0
        for batch in batches:  # per batch: inline
            messages += batch.count or len(batch.values)  # raw and one-message: count
            sent_bytes += batch.nbytes
        offsets: list[int] | None = None
        if base is not None:
            offsets = list(accumulate(map(len, map(_encoded_of, batches)), initial=base))
        complete_many(map(_future_of, batches), offsets)
        with self._lock:
            self._attempts.pop(tp, None)
            stats = self._stats
            stats["messages_sent"] += messages
            stats["bytes_sent"] += sent_bytes
            stats["batches_sent"] += len(batches)
            if self.acks:
                stats["messages_acked"] += messages
        self.accumulator.done(tp, batches)

    def retry_or_fail(self, tp: TopicPartition, batches: list[ProducerBatch], error: LogferryError) -> None:
        """Back off and retry the partition, or fail it (and its queued batches) for good."""
        now = self.clock()
        with self._lock:
            attempts = self._attempts.get(tp, 0) + 1
            retry = self.retry.should_retry(error, attempts, now - batches[0].created, self.accumulator.closed)
            if retry:
                self._attempts[tp] = attempts
                self._stats["retries"] += 1
            else:
                self._attempts.pop(tp, None)
        if isinstance(error, UnknownTopicOrPartitionError):
            self.on_unknown_topic(tp[0])
        if retry:
            self.accumulator.retry(tp, batches, now + self.retry.delay(attempts))
            log.info("retrying %s-%d after: %s", tp[0], tp[1], error)
            self.cluster.forget(tp[0])
            return
        sequences = self.sequences
        numbered = sequences is not None and any(b.encoded is not None and not b.raw for b in batches)
        failed = self.accumulator.fail(tp, batches)  # frees pooled bytes: looked at first
        if sequences is not None and numbered:
            # Numbered batches failed: whether the partition holds them is unknown, so
            # its next sequence is too. Restart the numbering (a new epoch, or a new id).
            if isinstance(error, ProducerFencedError):
                sequences.forget_id()
            else:
                sequences.reset()
        with self._lock:
            self._stats["batches_failed"] += len(failed)
            self._stats["messages_failed"] += sum(b.messages for b in failed)
        if not isinstance(error, ProducerClosedError):
            # a refusal by ACL is the caller's to report (its futures carry it; the mirror
            # logs one line per refused topic), not a line per partition and retry here
            level = logging.DEBUG if isinstance(error, AuthorizationError) else logging.ERROR
            log.log(level, "giving up on %d batches for %s-%d: %s", len(failed), tp[0], tp[1], error)
        _fail_futures(failed, error)


def _fail_futures(batches: Iterable[ProducerBatch], error: LogferryError) -> None:
    complete_many(map(_future_of, batches), None, error)


_encoded_of = attrgetter("encoded")
_future_of = attrgetter("future")


__all__ = ["RetryPolicy", "Sender", "plan_requests"]
