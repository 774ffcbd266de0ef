"""The produce api: validate each message set, append it, answer when it is safe.

Per part: find the led log, check the batches' CRCs (zlib, in C; no per-message
work), refuse acks=all when too few replicas are in sync, append, wake the followers'
long polls. The answer goes out at once (acks 1), after the fsync
(``flush_messages = 1``) or after every in-sync replica has the bytes (acks -1, all):
the service delivers a typed :class:`ProduceResult` (no wire format) to the front end
that asked, which answers in its protocol (or not at all, acks 0). The service runs
synchronously as frames arrive, so one connection's appends keep their order.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from broker.common.acl import Operation
from broker.common.errors import (
    AuthorizationError,
    BrokerShuttingDownError,
    ControlBatchRefusedError,
    DiskFullError,
    InvalidRequestError,
    InvalidTopicError,
    LogferryError,
)
from broker.common.names import TRANSACTION_STATE_TOPIC
from broker.common.principal import Principal
from broker.server.broker_metrics import BrokerMetrics
from broker.server.durability.disk_full import DiskFullReporter
from broker.server.durability.flusher import Flusher
from broker.server.security.authorizer import ALLOW_ALL, Authorizer
from broker.server.services.fetch import FetchService
from broker.server.services.results import ProduceReply, ProduceResult
from broker.server.services.routing import PartitionRouter
from broker.server.topic_settings import compress_message_set
from broker.storage.log_manager import LogManager
from broker.wire import records
from broker.wire.produce import ProduceAnswerPart, ProduceRequest
from broker.wire.records import TXN_DATA, TxnInfo

log = logging.getLogger("logferry.broker")

INTERNAL = Principal("Broker", "internal")
"""The principal of the broker's own appends (transaction markers written by its
transaction coordinator): not checked against ACLs. Never the principal of a
connection (those are ``User:``)."""


class ProduceService:
    """Appends produced message sets to the partitions this broker leads."""

    def __init__(
        self,
        router: PartitionRouter,
        replication: Any,
        logs: LogManager,
        flusher: Flusher,
        fetch: FetchService,
        metrics: BrokerMetrics,
        flush_each: bool,
        shutting_down: Callable[[], bool],
        disk_full: DiskFullReporter | None = None,
        authorizer: Authorizer = ALLOW_ALL,
        topic_codecs: Callable[[], dict[str, int]] | None = None,
    ):
        self.router = router
        self.replication = replication
        self.logs = logs
        self.flusher = flusher
        self.fetch = fetch
        self.metrics = metrics
        self.flush_each = flush_each
        """``flush_messages = 1``: answer only after the appended bytes are fsynced."""
        self.shutting_down = shutting_down
        self.disk_full = disk_full or DiskFullReporter(router.broker_id, metrics.produce_disk_full)
        """Logs (rate-limited) and counts appends refused for a full log dir."""
        self.authorizer = authorizer
        self.topic_codecs = topic_codecs or dict
        """Topic -> codec of its ``compression`` setting, for the topics that have one."""

    def produce(self, request: ProduceRequest, principal: Principal, reply: ProduceReply) -> None:
        """Append each message set; deliver the result to ``reply`` now, after fsync,
        or after the in-sync replicas have it (acks=all, -1); with acks=0 at once (the
        front end answers nothing). Raises a :class:`LogferryError` that refuses the
        whole request (the broker is shutting down). The commit round of the
        appended bytes starts before the answer is written, unless it fsyncs on the
        event loop (an idle log dir): then right after it, unless followers were
        woken (their fetches must not wait for that fsync: then on its thread).
        Partitions visible on write (``visibility = "written"``) answer their consumers'
        long polls first (end-to-end latency is what such a topic is for), then the
        producer; their fsyncs never run on the loop."""
        woke_followers = False
        written: list[tuple[str, int]] = []
        try:
            woke_followers = self._produce(request, principal, reply, written)
        finally:
            self.flusher.start_rounds(on_loop=not woke_followers and not written)

    def _may_write_markers(self, principal: Principal) -> bool:
        """Whether ``principal`` may append transaction markers for a coordinator: the
        brokers' right (cluster ALTER, as replication), so a client that marks its
        request cannot when ACLs are on."""
        try:
            self.authorizer.check_cluster(principal, Operation.ALTER)
        except AuthorizationError:
            return False
        return True

    def _produce(
        self, request: ProduceRequest, principal: Principal, reply: ProduceReply, written: list[tuple[str, int]]
    ) -> bool:
        """:meth:`produce`'s work; True if it woke followers' long polls. Adds to
        ``written`` the partitions appended to whose bytes are visible on write."""
        woke = False
        if self.shutting_down():
            raise BrokerShuttingDownError("broker is shutting down")
        acks = request.acks
        metrics = self.metrics
        replication = self.replication
        append_waiters = self.fetch.append_waiters
        results: list[ProduceAnswerPart] = []
        waits: list[tuple[str, int, int]] = []
        replica_waits: list[tuple[str, int, int, int]] = []
        failed = False
        codecs = self.topic_codecs()
        copies = request.copies
        markers_allowed = principal is INTERNAL or (request.markers and self._may_write_markers(principal))
        for index, (topic, partition, chunk) in enumerate(request.sets):
            try:
                if principal is not INTERNAL:
                    if topic == TRANSACTION_STATE_TOPIC:
                        raise InvalidTopicError(
                            f"{topic} is internal: only the transaction coordinators write it (Kafka's rule)"
                        )
                    self.authorizer.check_topic(principal, Operation.PRODUCE, topic)
                plog = self.router.leader_log(topic, partition, for_write=True, acks_all=acks == -1)
                scan = records.validate_message_set(chunk)
                if codecs and topic in codecs:  # the topic's compression policy
                    packed = compress_message_set(chunk, codecs[topic])
                    if packed is not chunk:  # batch sizes changed: where each one lies too
                        chunk = memoryview(packed)
                        scan = records.validate_message_set(chunk)
                if acks == -1:
                    replication.check_acks_all(topic, partition)
                producers = scan.producers
                txns = scan.txns
                if txns and not markers_allowed and index not in copies:
                    _refuse_markers(txns)
                messages = scan.messages
                held = None
                if producers is not None:  # an idempotent producer's: already held?
                    held = plog.check_producers(producers, strict=index not in copies)
                    if held is not None:
                        if held.nbytes == len(chunk):
                            self._duplicate(
                                topic, partition, held.offset, len(chunk), acks, results, waits, replica_waits
                            )
                            continue
                        chunk, producers = held.rest(chunk, producers)
                        messages -= held.messages
                        if txns:
                            txns = [
                                t._replace(position=t.position - held.nbytes) for t in txns if t.position >= held.nbytes
                            ]
                base = plog.append(chunk, messages, producers, txns)
                key = (topic, partition)
                metrics.bytes_in[key] += len(chunk)
                metrics.messages_in[key] += messages
                if key in append_waiters:
                    self.fetch.wake_fetchers(key)
                    woke = True
                if plog.visible_on_write:
                    written.append(key)
                results.append(ProduceAnswerPart(topic, partition, 0, base if held is None else held.offset, None))
                if acks == -1:
                    replica_waits.append((topic, partition, plog.end_offset, len(results) - 1))
                if self.flush_each:
                    waits.append((topic, partition, len(results) - 1))
                else:
                    self.flusher.appended(key, plog)
            except LogferryError as exc:
                failed = True
                metrics.produce_errors[(("error", type(exc).__name__),)] += 1
                message = self.disk_full.refused(topic, partition, exc) if isinstance(exc, DiskFullError) else str(exc)
                results.append(ProduceAnswerPart(topic, partition, exc.code, -1, message))
        for key in written:  # visible now: the consumers' answers go before the producer's
            self.fetch.wake_consumers(key)
            self.replication.on_publishable(key)
        # the fsync first: it gates what consumers see (unless they saw the bytes at
        # once: then it goes to its thread and never holds the loop, whose next turn
        # may carry the next message to a consumer)
        self.flusher.start_rounds(inline=False, on_loop=not woke and not written)
        rejected = request.rejected  # a malformed part ends the request
        if rejected is not None:
            failed = True
            metrics.produce_errors[(("error", InvalidRequestError.__name__),)] += 1
            results.append(
                ProduceAnswerPart(rejected.topic, rejected.partition, rejected.error.code, -1, str(rejected.error))
            )
        if acks == 0 or (not waits and not replica_waits):
            reply(ProduceResult(results, failed))
            return woke
        pending = PendingProduce(results, lambda parts, failed: reply(ProduceResult(parts, failed)))
        for topic, partition, end, index in replica_waits:
            if replication.wait_for_replicas(topic, partition, end, pending, index):
                pending.left += 1
        # flush.messages = 1: acknowledge only after the appended bytes are fsynced.
        for topic, partition, index in waits:
            key = (topic, partition)
            appended = self.logs.get(*key)
            assert appended is not None  # appended to a moment ago, on this event loop turn
            pending.left += 1
            self.flusher.ack_after_flush(key, appended, pending, index)
        pending.part_done(None)  # the handler's own hold: answers now if nothing waits
        return woke

    def _duplicate(
        self,
        topic: str,
        partition: int,
        offset: int,
        nbytes: int,
        acks: int,
        results: list[ProduceAnswerPart],
        waits: list[tuple[str, int, int]],
        replica_waits: list[tuple[str, int, int, int]],
    ) -> None:
        """A retried set the log holds already at ``offset``: answer as if it had been
        appended now (same offset), once it is as safe as its acks ask (replicated,
        fsynced), so a retry's answer promises what the first answer would have."""
        self.metrics.produce_duplicates[(topic, partition)] += 1
        log.debug("%s-%d: duplicate batch from an idempotent producer, held at offset %d", topic, partition, offset)
        results.append(ProduceAnswerPart(topic, partition, 0, offset, None))
        if acks == -1:
            replica_waits.append((topic, partition, offset + nbytes, len(results) - 1))
        if self.flush_each:
            waits.append((topic, partition, len(results) - 1))


class PendingProduce:
    """A produce result waiting for fsyncs (flush.messages = 1) and for replicas (acks=all).

    ``left`` counts the awaited events plus one hold for the handler itself; each
    :meth:`part_done` settles one, recording an error on that part if given, and the
    last one calls ``done(results, failed)``.
    """

    __slots__ = ("results", "left", "done")

    def __init__(self, results: list[Any], done: Callable[[list[Any], bool], None]):
        self.results = results
        """Answer parts (produce's, or append-at's: both have ``error`` and ``message``)."""
        self.left = 1
        self.done = done

    def part_done(self, index: int | None, error: LogferryError | None = None) -> None:
        """One awaited event happened (``error``: it failed for part ``index``)."""
        if error is not None and index is not None and not self.results[index].error:
            part = self.results[index]
            self.results[index] = (
                part._replace(error=error.code, message=str(error))
                if not hasattr(part, "base_offset")
                else part._replace(error=error.code, base_offset=-1, message=str(error))
            )
        self.left -= 1
        if self.left == 0:
            self.done(self.results, any(r.error for r in self.results))


def _refuse_markers(txns: list[TxnInfo]) -> None:
    """ControlBatchRefusedError if a producer's part holds a transaction marker: only the
    coordinator (the INTERNAL principal here, or its native request to a leader marked
    ``markers``) and the mirror's copies write them. Per batch with a producer id,
    never per message."""
    for txn in txns:
        if txn.control != TXN_DATA:
            raise ControlBatchRefusedError(
                f"a control batch (transaction marker) at byte {txn.position}: only the transaction coordinator "
                "writes markers"
            )


__all__ = ["INTERNAL", "PendingProduce", "ProduceService"]
