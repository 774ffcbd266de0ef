"""The Kafka-protocol apis, served by the same services as logferry's own protocol.

Each handler takes a parsed Kafka request (:mod:`broker.server.kafka.protocol`) and returns
the response frame (None for a produce with acks=0). Produce stores each record
batch as it arrived (a magic 3 batch, per-batch work only: :func:`convert.store_batches`)
and hands the message sets to :class:`ProduceService`
(the same validation, append, flush and acks=all replication path as native
produces); Fetch asks :class:`FetchService` (the same long poll and visible end) and
serves the batches of its file slices as record batches v2 (Kafka producers' as stored,
agents' and native producers' converted); Metadata and InitProducerId render the admin
service's typed results. Each service returns a typed result
(:mod:`broker.server.services.results`) that this module encodes with kio; nothing here
decodes a native answer. ListOffsets reads the partition logs. Offsets follow the
log's message offsets (:mod:`broker.server.kafka.offsets`, docs/kafka.md); logferry's
own protocol keeps byte offsets.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from broker.common import topic_config
from broker.common.acl import Operation
from broker.common.errors import (
    CorruptBatchError,
    LogferryError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)
from broker.common.names import TRANSACTION_STATE_TOPIC, validate_topic_name
from broker.common.ratelimit import RateLimitedLog
from broker.coordination.registry import ClusterView
from broker.server.config import BrokerConfig
from broker.server.kafka import convert, protocol
from broker.server.kafka.chunks import Buffer, Chunks
from broker.server.kafka.configs import KafkaConfigs, logferry_topic_config
from broker.server.kafka.consumer_group_service import KafkaConsumerGroups
from broker.server.kafka.delete_records import KafkaDeleteRecords
from broker.server.kafka.errors import kafka_error, kafka_error_of_code
from broker.server.kafka.group_deletion import KafkaGroupDeletion
from broker.server.kafka.group_service import KafkaGroupService
from broker.server.kafka.offsets import Positions
from broker.server.kafka.partitions import KafkaPartitions
from broker.server.kafka.produce_response import PartitionAnswer, encode_produce_response
from broker.server.kafka.protocol import (
    Api,
    Request,
    api_versions_response,
    encode_response,
    encode_response_parts,
    make,
    response_schema,
    topic_uuid,
)
from broker.server.kafka.txn_service import KafkaTxnService
from broker.server.services.admin import AdminService
from broker.server.services.fetch import FetchService
from broker.server.services.produce import ProduceService
from broker.server.services.results import FetchResult, MetadataQuery, ProduceResult
from broker.server.services.routing import PartitionRouter
from broker.storage.partition_log import PartitionLog
from broker.wire import records
from broker.wire.fetch import MAX_WAIT_MS, FetchPart, FetchRequest, ReplicaFetchPart
from broker.wire.produce import MessageSet, ProduceRequest

log = logging.getLogger("logferry.kafka")
_refusals = RateLimitedLog(log, 10.0, "more refused since the last line")
"""A producer retrying an oversized batch in a loop must not flood the log."""

CLUSTER_ID = "logferry"
LATEST, EARLIEST = -1, -2
"""ListOffsets' special timestamps."""
_NO_TIME = timedelta(0)


class _Channel:
    """What a Kafka request's handlers see of its connection: the peer, the principal,
    and a way to close it (the only signal an acks=0 producer gets of a failure)."""

    def __init__(self, peer: str, principal: Any, close: Callable[[], None]):
        self.peer = peer
        self.principal = principal
        self._close = close

    def close(self) -> None:
        self._close()


class KafkaService:
    """Answers Kafka requests with the broker's services."""

    def __init__(
        self,
        config: BrokerConfig,
        router: PartitionRouter,
        produce: ProduceService,
        fetch: FetchService,
        admin: AdminService,
        view: Callable[[], ClusterView],
        count: Callable[[str, float, bool], None],
        groups: KafkaGroupService | None = None,
        txns: KafkaTxnService | None = None,
    ):
        self.config = config
        self.max_message_bytes = config.max_message_bytes
        """A record batch longer than this gets MESSAGE_TOO_LARGE (Kafka's
        ``message.max.bytes``; frames over ``max_request_bytes`` never get here)."""
        self.router = router
        self.produce_service = produce
        self.fetch_service = fetch
        self.admin = admin
        self.view = view
        self.count = count
        self._handlers = {
            Api.API_VERSIONS: self.api_versions,
            Api.METADATA: self.metadata,
            Api.PRODUCE: self.produce,
            Api.FETCH: self.fetch,
            Api.LIST_OFFSETS: self.list_offsets,
            Api.CREATE_TOPICS: self.create_topics,
            Api.DELETE_TOPICS: self.delete_topics,
            Api.INIT_PRODUCER_ID: self.init_producer_id,
        }
        configs = KafkaConfigs(config, view, admin.authorizer, admin.alter_topic_config)
        self._handlers[Api.DESCRIBE_CONFIGS] = configs.describe_configs
        self._handlers[Api.INCREMENTAL_ALTER_CONFIGS] = configs.incremental_alter_configs
        partitions = KafkaPartitions(admin.grow_topic, view, admin.authorizer)
        self._handlers[Api.CREATE_PARTITIONS] = partitions.create_partitions
        self.groups = groups
        self.positions = Positions()
        """Batch starts recently served or appended, in message and byte offsets: where
        Kafka consumers fetch next and the high watermark, found without reading the log."""
        deleting = KafkaDeleteRecords(router.leader_log, self.positions, admin.authorizer)
        self._handlers[Api.DELETE_RECORDS] = deleting.delete_records
        if groups is not None:
            self._handlers.update(groups.handlers())
            self._handlers.update(KafkaGroupDeletion(groups).handlers())
            self._handlers.update(KafkaConsumerGroups(groups).handlers())
        self.txns = txns
        """The transaction coordinator (None: transactional producers are refused)."""
        if txns is not None:
            self._handlers.update(txns.handlers())

    async def handle(self, request: Request, channel: _Channel) -> bytes | list[Buffer] | None:
        """The response frame for ``request`` (None: no response, acks=0); a fetch's
        as a list of buffers, its log bytes not copied (:mod:`broker.server.kafka.chunks`)."""
        handler = self._handlers.get(Api(request.api_key))
        if handler is None:
            return protocol.unsupported_response(request.api_key, request.version, request.correlation_id)
        body = await handler(request, channel)
        if body is None or isinstance(body, bytes):  # bytes: a frame the handler packed itself
            return body
        if request.api_key == Api.FETCH:
            return encode_response_parts(request.api_key, request.version, request.correlation_id, body)
        return encode_response(request.api_key, request.version, request.correlation_id, body)

    # -- ApiVersions, Metadata -------------------------------------------------------

    async def api_versions(self, request: Request, channel: _Channel) -> Any:
        """The apis served and their versions."""
        return api_versions_response(request.version)

    async def metadata(self, request: Request, channel: _Channel) -> Any:
        """Every live broker's Kafka address and the topics asked for (auto-created
        when the client allows it and the broker does), as the admin service's
        :class:`~broker.server.services.results.MetadataResult` says."""
        v = request.version
        body = request.body
        asked = None if body.topics is None else [t.name for t in body.topics if t.name is not None]
        unknown_ids = []
        if body.topics is not None and any(t.name is None for t in body.topics):
            # v10+ may name a topic by id (librdkafka does, for the topics of a KIP-848
            # assignment): the ids are the cluster view's (topic_uuid)
            view = self.view()
            names = {topic_uuid(topic_id): name for name, topic_id in view.topic_ids.items()}
            for t in body.topics:
                if t.name is None:
                    name = names.get(t.topic_id)
                    if name is None:
                        unknown_ids.append(t.topic_id)
                    elif asked is not None and name not in asked:
                        asked.append(name)
        allow = getattr(body, "allow_auto_topic_creation", True)
        result = await self.admin.metadata(MetadataQuery(asked, allow, kafka=True), channel.principal)
        schema = response_schema(Api.METADATA, v)
        broker_cls = response_schema(Api.METADATA, v, "MetadataResponseBroker")
        topic_cls = response_schema(Api.METADATA, v, "MetadataResponseTopic")
        part_cls = response_schema(Api.METADATA, v, "MetadataResponsePartition")
        live = {b.broker_id for b in result.brokers}
        topics = [
            make(topic_cls, error_code=ErrorCode.unknown_topic_id, name=None, topic_id=topic_id, partitions=())
            for topic_id in unknown_ids
        ]
        for topic in result.topics:
            if topic.error is not None:
                topics.append(
                    make(
                        topic_cls,
                        error_code=kafka_error(topic.error),
                        name=topic.name,
                        topic_id=uuid.UUID(int=0),
                        partitions=(),
                    )
                )
                continue
            parts = []
            for p in topic.partitions:
                live_leader = p.leader in live
                parts.append(
                    make(
                        part_cls,
                        error_code=ErrorCode.none if live_leader else ErrorCode.leader_not_available,
                        partition_index=p.partition,
                        leader_id=p.leader if live_leader else -1,
                        leader_epoch=p.leader_epoch,
                        replica_nodes=tuple(p.replicas),
                        isr_nodes=tuple(p.isr),
                        offline_replicas=tuple(p.offline),
                    )
                )
            topics.append(
                make(
                    topic_cls,
                    error_code=ErrorCode.none,
                    name=topic.name,
                    topic_id=topic_uuid(topic.topic_id),
                    is_internal=topic.name == TRANSACTION_STATE_TOPIC,
                    partitions=tuple(parts),
                )
            )
        brokers = tuple(
            make(broker_cls, node_id=b.broker_id, host=b.host, port=b.port, rack=b.rack or None) for b in result.brokers
        )
        return make(
            schema,
            throttle_time=_NO_TIME,
            brokers=brokers,
            cluster_id=CLUSTER_ID,
            controller_id=result.controller,
            topics=tuple(topics),
        )

    # -- Produce -----------------------------------------------------------------------

    async def produce(self, request: Request, channel: _Channel) -> Any:
        """Convert each partition's record batches and append them through the
        produce service; answer per partition with the first batch's offset."""
        body = request.body
        acks = body.acks
        order: list[tuple[str, int, ErrorCode | int | None, str | None]] = []
        sets: list[MessageSet] = []
        for topic in body.topic_data:
            for part in topic.partition_data:
                try:
                    if acks not in (0, 1, -1):
                        order.append(
                            (
                                topic.name,
                                part.index,
                                ErrorCode.invalid_required_acks,
                                f"acks must be 0, 1 or -1, not {acks}",
                            )
                        )
                        continue
                    converted = convert.store_batches(part.records or b"", self.max_message_bytes)
                    if not converted:
                        raise CorruptBatchError("the produce request holds no data record")
                    sets.append(MessageSet(topic.name, part.index, memoryview(converted)))
                    order.append((topic.name, part.index, None, None))
                except MessageTooLargeError as exc:
                    _refusals.warning(
                        "Kafka produce from %s to %s-%d refused: %s",
                        channel.peer,
                        topic.name,
                        part.index,
                        exc,
                        key="message_too_large",
                    )
                    order.append((topic.name, part.index, kafka_error(exc), str(exc)))
                except LogferryError as exc:
                    order.append((topic.name, part.index, kafka_error(exc), str(exc)))
        if acks == 0 and any(error is not None for _, _, error, _ in order):
            # acks=0 gets no answer to carry the error: as Kafka does, the partitions
            # that passed are appended and the connection is closed, which is the only
            # thing such a producer notices.
            channel.close()
        results: list[tuple[int, int, str | None]] = []
        if sets:
            started = time.perf_counter()
            future: asyncio.Future[ProduceResult] = asyncio.get_running_loop().create_future()

            def reply(result: ProduceResult) -> None:
                self.count("kafka_produce", time.perf_counter() - started, result.failed)
                if acks != 0:
                    if not future.done():  # cancelled: the connection went away meanwhile
                        future.set_result(result)
                elif result.failed:  # acks=0 cannot report errors: closing tells the client
                    log.warning(
                        "closing acks=0 Kafka producer %s after a failed produce: %s", channel.peer, result.parts
                    )
                    channel.close()

            before = self._log_ends(sets)
            try:
                self.produce_service.produce(ProduceRequest(acks, sets, None), channel.principal, reply)
                self._note_appends(before)
            except LogferryError as exc:
                self.count("kafka_produce", time.perf_counter() - started, True)
                if acks == 0:
                    return None
                results = [(kafka_error(exc), -1, str(exc))] * len(sets)
            else:
                if acks == 0:
                    return None
                produced = await future
                results = [
                    (kafka_error_of_code(p.error), self._base_message(p.base_offset, ends), p.message)
                    for p, ends in zip(produced.parts, before)  # noqa: B905 (a part per set)
                ]
        elif acks == 0:
            return None
        by_topic: dict[str, list[PartitionAnswer]] = {}
        it = iter(results)
        for name, index, error, message in order:
            if error is None:
                error, base, message = next(it)
            else:
                base = -1
            by_topic.setdefault(name, []).append((index, error, base, message if error != ErrorCode.none else None))
        return encode_produce_response(request.version, request.correlation_id, list(by_topic.items()))

    def _watermarks(self, plog: PartitionLog | None) -> tuple[int, int]:
        """(high watermark, log start) in message offsets; -1s if they cannot be read."""
        if plog is None:
            return -1, -1
        try:
            return self.positions.high_watermark(plog), plog.start_message
        except LogferryError:
            return -1, -1

    def _log_ends(self, sets: list[MessageSet]) -> list[tuple[PartitionLog, int, int] | None]:
        """Per message set, its partition's log and the log's end (byte and message
        offsets) before the produce: the produce service appends on this loop turn, so
        an answer at that byte offset is that message offset (no log read)."""
        out: list[tuple[PartitionLog, int, int] | None] = []
        for s in sets:
            try:
                plog = self.router.leader_log(s.topic, s.partition)
            except LogferryError:
                out.append(None)  # the produce service answers the error
                continue
            out.append((plog, plog.end_offset, plog.end_message))
        return out

    def _note_appends(self, before: list[tuple[PartitionLog, int, int] | None]) -> None:
        """Remember where the appends ended: the next high watermarks, fetch offsets."""
        for ends in before:
            if ends is not None:
                plog = ends[0]
                self.positions.add(plog, plog.end_message, plog.end_offset)

    def _base_message(self, base: int, ends: tuple[PartitionLog, int, int] | None) -> int:
        """The message offset of a produce answer's byte offset ``base`` (-1 stays)."""
        if base < 0 or ends is None:
            return -1
        plog, end, message = ends
        if base == end:
            return message
        try:  # an idempotent producer's retry, held at an older offset
            return self.positions.message_at(plog, base)
        except LogferryError:
            return -1

    # -- Fetch -------------------------------------------------------------------------

    async def fetch(self, request: Request, channel: _Channel) -> Any:
        """Long-poll through the fetch service, then serve the batches read.

        Each fetch offset is a message offset: the byte offset of the batch holding it
        is what the fetch service reads from (a client asking inside a batch gets the
        whole batch and drops the records before its position itself, as with Kafka),
        and every batch served carries its first message offset."""
        body = request.body
        parts: list[FetchPart] = []
        logs: list[PartitionLog | None] = []
        firsts: list[int] = []  # per part, the message offset of the batch read from
        early: dict[int, tuple[ErrorCode, int, int]] = {}
        positions = self.positions
        for topic in body.topics:
            for part in topic.partitions:
                index = len(parts)
                offset = message = part.fetch_offset
                plog = None
                try:
                    plog = self.router.leader_log(topic.topic, part.partition)
                    offset, skip = positions.locate(plog, message)
                    message -= skip
                except OffsetOutOfRangeError as exc:  # the client resets from these
                    early[index] = (kafka_error(exc), *self._watermarks(plog))
                except LogferryError as exc:
                    early[index] = (kafka_error(exc), -1, -1)
                parts.append(FetchPart(topic.topic, part.partition, offset, max(part.partition_max_bytes, 1)))
                logs.append(plog)
                firsts.append(message)
        committed_only = getattr(body, "isolation_level", 0) == 1  # read_committed
        wait_ms = min(int(body.max_wait.total_seconds() * 1000), MAX_WAIT_MS)
        live: list[FetchPart | ReplicaFetchPart] = [p for i, p in enumerate(parts) if i not in early]
        answers: list[Any] = []
        slices: list[Any] = []
        if live:
            started = time.perf_counter()
            got: list[FetchResult] = []  # the service delivers before its call returns
            try:
                await self.fetch_service.fetch(
                    FetchRequest(live, wait_ms if not early else 0, max(body.min_bytes, 1), None),
                    channel.principal,
                    got.append,
                )
            except LogferryError as exc:
                self.count("kafka_fetch", time.perf_counter() - started, True)
                code = kafka_error(exc)
                answers = [None] * len(live)
                for i in range(len(parts)):
                    early.setdefault(i, (code, -1, -1))
            else:
                self.count("kafka_fetch", time.perf_counter() - started, False)
                answers = list(got[0].parts)
                slices = list(got[0].slices)
        v = request.version
        data_cls = response_schema(Api.FETCH, v, "PartitionData")
        topic_cls = response_schema(Api.FETCH, v, "FetchableTopicResponse")
        aborted_cls = response_schema(Api.FETCH, v, "AbortedTransaction")
        by_topic: dict[str, list[Any]] = {}
        held_back: dict[tuple[str, int], tuple[PartitionLog, int]] = {}
        """read_committed parts with data past an open transaction's start: their log and
        that start (the last stable offset's byte position)."""
        # zip without strict=: _pad makes the lengths equal; per fetch
        live_iter = iter(zip(answers, _pad(slices, len(answers))))  # noqa: B905
        for i, part in enumerate(parts):
            data: bytes | Chunks = b""
            aborted: tuple[Any, ...] | None = None
            if i in early:
                error, hw, start = early[i]
                lso = hw
            else:
                answer, piece = next(live_iter)
                error = kafka_error_of_code(answer.error)
                plog = logs[i]
                assert plog is not None
                hw = start = lso = -1
                try:
                    unstable = plog.producers.txns.first_unstable()
                    if error == ErrorCode.none and piece is not None and piece.count:
                        limit = piece.count
                        if committed_only and unstable is not None:
                            limit = min(limit, unstable - piece.offset)
                            if limit < piece.count:
                                held_back[(part.topic, part.partition)] = (plog, unstable)
                        if limit > 0:
                            first = (
                                firsts[i] if piece.offset == part.offset else positions.message_at(plog, piece.offset)
                            )
                            data, served_end, next_message = _to_kafka_records(piece, first, limit)
                            positions.add(plog, next_message, served_end)
                            if committed_only:
                                aborted = self._aborted(plog, piece.offset, served_end, aborted_cls)
                    if answer.visible_end is not None:
                        hw, start = positions.high_watermark(plog), plog.start_message
                        lso = hw if unstable is None else min(hw, positions.message_at(plog, unstable))
                except LogferryError as exc:
                    error, data = kafka_error(exc), b""
            by_topic.setdefault(part.topic, []).append(
                make(
                    data_cls,
                    partition_index=part.partition,
                    error_code=error,
                    high_watermark=hw,
                    last_stable_offset=lso,
                    log_start_offset=start,
                    aborted_transactions=aborted if committed_only else (),
                    preferred_read_replica=-1,
                    records=data,
                )
            )
        if held_back and not any(p.records for ps in by_topic.values() for p in ps):
            # Everything past an open transaction: the fetch service found data, so it did
            # not wait. Wait here until a last stable offset moves (Kafka's delayed fetch),
            # else the consumer would spin; the consumer fetches again at once.
            await self._await_stable(held_back, wait_ms / 1000)
        return make(
            response_schema(Api.FETCH, v),
            throttle_time=_NO_TIME,
            error_code=ErrorCode.none,
            session_id=0,
            responses=tuple(make(topic_cls, topic=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
        )

    async def _await_stable(self, held: dict[tuple[str, int], tuple[PartitionLog, int]], wait_s: float) -> None:
        """Return when the earliest open transaction of one of the ``held`` partitions
        is no longer the one there (a marker ended it: the last stable offset moved), or
        after ``wait_s``. Woken by appends to those partitions (the markers' and any
        other), looked at per append, never per message."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while (left := deadline - loop.time()) > 0:
            if any(plog.producers.txns.first_unstable() != start for plog, start in held.values()):
                return
            await self.fetch_service.wait_for_append(list(held), left)

    def _aborted(self, plog: PartitionLog, start: int, end: int, cls: Any) -> tuple[Any, ...]:
        """The aborted transactions with data in bytes ``[start, end)`` of ``plog``, as
        (producer id, first message offset): per transaction, never per message."""
        return tuple(
            make(cls, producer_id=a.producer_id, first_offset=self.positions.message_at(plog, a.first))
            for a in plog.producers.txns.aborted_overlapping(start, end)
        )

    # -- InitProducerId ------------------------------------------------------------------

    async def init_producer_id(self, request: Request, channel: _Channel) -> Any:
        """An idempotent producer's id, from the same ZooKeeper id blocks as native
        producers'; its batches are stored as magic 2 batches, so the leader drops
        retried ones and refuses sequence gaps as for native idempotent producers.
        A transactional id is the transaction coordinator's
        (:meth:`KafkaTxnService.init_producer_id`)."""
        schema = response_schema(Api.INIT_PRODUCER_ID, request.version)
        body = request.body
        if body.transactional_id is not None:
            if self.txns is None:
                return make(
                    schema,
                    throttle_time=_NO_TIME,
                    error_code=ErrorCode.transactional_id_authorization_failed,
                    producer_id=-1,
                    producer_epoch=-1,
                )
            error, pid, epoch = await self.txns.init_producer_id(
                request,
                channel.principal,
                body.transactional_id,
                int(body.transaction_timeout.total_seconds() * 1000),
                getattr(body, "producer_id", -1),
                getattr(body, "producer_epoch", -1),
            )
            return make(schema, throttle_time=_NO_TIME, error_code=error, producer_id=pid, producer_epoch=epoch)
        started = time.perf_counter()
        try:
            result = await self.admin.init_producer_id()
        except LogferryError as exc:
            self.count("kafka_init_producer_id", time.perf_counter() - started, True)
            return make(schema, throttle_time=_NO_TIME, error_code=kafka_error(exc), producer_id=-1, producer_epoch=-1)
        self.count("kafka_init_producer_id", time.perf_counter() - started, False)
        return make(
            schema,
            throttle_time=_NO_TIME,
            error_code=ErrorCode.none,
            producer_id=result.producer_id,
            producer_epoch=result.epoch,
        )

    # -- CreateTopics, DeleteTopics ------------------------------------------------------

    async def create_topics(self, request: Request, channel: _Channel) -> Any:
        """Create topics in ZooKeeper as the native create does (-1: the broker's
        default partitions and replication factor), with the configs that have a
        logferry topic setting (``kafka-topics --create --config retention.ms=...``;
        another is INVALID_CONFIG). Manual replica assignments are refused
        (INVALID_REQUEST), not silently dropped."""
        v = request.version
        result_cls = response_schema(Api.CREATE_TOPICS, v, "CreatableTopicResult")
        body = request.body
        results = []
        for topic in body.topics:
            error, message = ErrorCode.none, None
            try:
                validate_topic_name(topic.name)
                self.admin.authorizer.check_topic(channel.principal, Operation.CREATE, topic.name)
                settings = logferry_topic_config(self.config, ((c.name, c.value) for c in topic.configs))
                if topic.assignments:
                    error = ErrorCode.invalid_request
                    message = (
                        "manual replica assignments are not taken through Kafka's CreateTopics; "
                        "logferry places replicas itself"
                    )
                elif topic.name in self.view().topics:
                    error, message = ErrorCode.topic_already_exists, "topic exists"
                elif getattr(body, "validate_only", False):
                    topic_config.validate(settings)
                else:
                    await self.admin.create_in_zk(
                        topic.name,
                        topic.num_partitions if topic.num_partitions > 0 else self.config.num_partitions,
                        max(topic.replication_factor, 0),
                        config=settings or None,
                    )
            except LogferryError as exc:
                error, message = kafka_error(exc), str(exc)
            assignment = self.view().topics.get(topic.name, {})
            results.append(
                make(
                    result_cls,
                    name=topic.name,
                    error_code=error,
                    error_message=message,
                    topic_config_error_code=0,
                    num_partitions=len(assignment) if assignment else -1,
                    replication_factor=len(next(iter(assignment.values()))) if assignment else -1,
                    # Empty, not null: Kafka's Java Admin (v5+) reads the list of every
                    # created topic (a NullPointerException in createTopics and
                    # kafka-topics --create otherwise); Kafka lists the topic's configs.
                    configs=(),
                )
            )
        return make(response_schema(Api.CREATE_TOPICS, v), throttle_time=_NO_TIME, topics=tuple(results))

    async def delete_topics(self, request: Request, channel: _Channel) -> Any:
        """Delete topics in ZooKeeper (each broker drops its logs when it sees that)."""
        v = request.version
        result_cls = response_schema(Api.DELETE_TOPICS, v, "DeletableTopicResult")
        loop = asyncio.get_running_loop()
        results = []
        for name in request.body.topic_names:
            error, message = ErrorCode.none, None
            try:
                self.admin.authorizer.check_topic(channel.principal, Operation.DELETE, name)
                registry = self.admin.registry()
                if registry is None:
                    raise UnknownTopicOrPartitionError("the broker is not registered yet")
                await loop.run_in_executor(self.admin.admin_pool, registry.delete_topic, name)
            except LogferryError as exc:
                error, message = kafka_error(exc), str(exc)
            results.append(make(result_cls, name=name, error_code=error, error_message=message))
        return make(response_schema(Api.DELETE_TOPICS, v), throttle_time=_NO_TIME, responses=tuple(results))

    # -- ListOffsets -------------------------------------------------------------------

    async def list_offsets(self, request: Request, channel: _Channel) -> Any:
        """Earliest, latest, or the first record at or after a time."""
        v = request.version
        part_cls = response_schema(Api.LIST_OFFSETS, v, "ListOffsetsPartitionResponse")
        topic_cls = response_schema(Api.LIST_OFFSETS, v, "ListOffsetsTopicResponse")
        topics = []
        loop = asyncio.get_running_loop()
        for topic in request.body.topics:
            parts = []
            for part in topic.partitions:
                ts = part.timestamp
                try:
                    self.admin.authorizer.check_topic(channel.principal, Operation.DESCRIBE, topic.name)
                    plog = self.router.leader_log(topic.name, part.partition_index)
                    if ts == LATEST:
                        found, at = self.positions.high_watermark(plog), -1
                        unstable = plog.producers.txns.first_unstable()
                        if unstable is not None and getattr(request.body, "isolation_level", 0) == 1:
                            found = min(found, self.positions.message_at(plog, unstable))
                    elif ts == EARLIEST:
                        found, at = plog.start_message, -1
                    elif ts < 0:
                        raise UnknownTopicOrPartitionError(f"ListOffsets timestamp {ts} is not supported")
                    else:
                        batch, index, at = await loop.run_in_executor(None, _offset_for_time, plog, ts)
                        found = -1 if batch < 0 else self.positions.message_at(plog, batch) + index
                        found = found if found < 0 else max(found, plog.start_message)
                    parts.append(
                        make(
                            part_cls,
                            partition_index=part.partition_index,
                            error_code=ErrorCode.none,
                            timestamp=at,
                            offset=found,
                            leader_epoch=-1,
                        )
                    )
                except LogferryError as exc:
                    parts.append(
                        make(
                            part_cls,
                            partition_index=part.partition_index,
                            error_code=kafka_error(exc),
                            timestamp=-1,
                            offset=-1,
                            leader_epoch=-1,
                        )
                    )
            topics.append(make(topic_cls, name=topic.name, partitions=tuple(parts)))
        return make(response_schema(Api.LIST_OFFSETS, v), throttle_time=_NO_TIME, topics=tuple(topics))


def _offset_for_time(plog: Any, ts: int) -> tuple[int, int, int]:
    """``(batch byte offset, index in the batch, timestamp)`` of the first record at or
    after ``ts``; ``(-1, 0, -1)`` when every record is older (Kafka's answer). Runs in a
    worker thread (the message offset is found back on the event loop)."""
    offset = plog.offset_for_time(ts)
    end = plog.visible_end
    while offset < end:
        raw = plog.read_bytes(offset, 1 << 20)
        batches, _ = records.decode_batches(raw, offset)
        if not batches:
            break
        for batch in batches:
            for i, t in enumerate(batch.timestamps):
                if t >= ts:
                    return batch.offset, i, t
            offset = batch.next_offset
    return -1, 0, -1


def _to_kafka_records(piece: Any, message: int, limit: int | None = None) -> tuple[Chunks, int, int]:
    """The record batches v2 for the batches in a file slice whose first batch starts
    with message offset ``message`` (Kafka producers' as stored, the others converted:
    :func:`convert.serve_chunks`), the byte offset of the batch after the last one and
    its message offset (where the client fetches next). The slice is read once into a
    buffer the answer then points into (no further copy). ``limit``: read no more than
    this many bytes (a read_committed fetch stops at the first open transaction)."""
    raw = bytearray(piece.count if limit is None else min(piece.count, limit))
    got = os.preadv(piece.file.fileno(), [raw], piece.position)
    if got != len(raw):  # truncated meanwhile: serve the whole batches read
        del raw[got:]
    out, used, next_message = convert.serve_chunks(raw, piece.offset, message)
    return out, piece.offset + used, next_message


def _pad(items: list[Any], n: int) -> list[Any]:
    return items + [None] * (n - len(items))


__all__ = ["KafkaService"]
