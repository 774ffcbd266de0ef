"""The administrative apis: offsets, metadata, create_topic, delete_topic, elect_leaders,
alter_topic, create_partitions and init_producer_id.

Each handler gets a typed request (already checked by :mod:`broker.wire`). Metadata and
init_producer_id return a typed result (:mod:`broker.server.services.results`) that
each front end renders; the others still answer through a responder. ZooKeeper calls
run in the broker's small admin thread pool so the event loop never blocks on them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

from broker.common.acl import Operation
from broker.common.acl import topic as topic_resource
from broker.common.errors import (
    BrokerShuttingDownError,
    LogferryError,
    OffsetOutOfRangeError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from broker.common.names import validate_topic_name
from broker.common.principal import Principal
from broker.coordination import zk
from broker.coordination.producer_ids import ProducerIdAllocator
from broker.coordination.registry import BrokerRegistry, ClusterView
from broker.server.config import BrokerConfig
from broker.server.security.authorizer import ALLOW_ALL, Authorizer
from broker.server.services.responder import Responder
from broker.server.services.results import (
    BrokerNode,
    MetadataQuery,
    MetadataResult,
    PartitionMetadata,
    ProducerIdResult,
    TopicResult,
)
from broker.server.services.routing import PartitionRouter
from broker.storage.partition_log import PartitionLog
from broker.wire.offsets import (
    BYTE,
    EARLIEST,
    OffsetsAnswer,
    OffsetsRequest,
    encode_offsets_answer,
)
from broker.wire.topics import (
    AlterTopicRequest,
    CreatePartitionsRequest,
    CreateTopicAnswer,
    CreateTopicRequest,
    DeleteTopicRequest,
    ElectLeadersAnswer,
    ElectLeadersRequest,
    encode_create_topic_answer,
    encode_elect_leaders_answer,
)


class AdminService:
    """Answers the apis that read or change the cluster's metadata.

    ``view``, ``registry`` and ``zk_client`` are callables: the broker replaces its
    view on every change and opens its ZooKeeper session after this is built.
    """

    def __init__(
        self,
        config: BrokerConfig,
        router: PartitionRouter,
        view: Callable[[], ClusterView],
        registry: Callable[[], BrokerRegistry | None],
        zk_client: Callable[[], Any],
        admin_pool: Executor,
        shutting_down: Callable[[], bool],
        authorizer: Authorizer = ALLOW_ALL,
    ):
        self.config = config
        self.authorizer = authorizer
        self.router = router
        self.view = view
        self.registry = registry
        self.zk_client = zk_client
        self.admin_pool = admin_pool
        self.shutting_down = shutting_down
        self._producer_ids: ProducerIdAllocator | None = None

    async def offsets(self, request: OffsetsRequest, responder: Responder) -> None:
        """The first offset, the visible end, or the offset for a time."""
        if request.many is not None:
            responder.answer(self._ranges(request.many, responder))
            return
        self.authorizer.check_topic(responder.principal, Operation.DESCRIBE, request.topic)
        plog = self.router.leader_log(request.topic, request.partition)
        at = request.at
        if isinstance(at, tuple):  # one addressing into the other (reads index files)
            answer = await asyncio.get_running_loop().run_in_executor(self.admin_pool, _translate, plog, at)
            responder.answer(encode_offsets_answer(answer))
            return
        if isinstance(at, int):
            offset = await asyncio.get_running_loop().run_in_executor(self.admin_pool, plog.offset_for_time, at)
        elif at == EARLIEST:
            offset = plog.start_offset
        else:  # LATEST; parse_offsets_request allows nothing else
            offset = plog.visible_end
        responder.answer(
            encode_offsets_answer(OffsetsAnswer(offset, plog.start_offset, plog.visible_end, plog.avg_message_bytes))
        )

    def _ranges(self, pairs: tuple[tuple[str, int], ...], responder: Responder) -> dict[str, Any]:
        """The ranges of many partitions (``many``): one item per pair, an error item for
        a partition this broker does not lead or the principal may not describe."""
        refused: dict[str, LogferryError | None] = {}
        items: list[dict[str, Any]] = []
        for topic, partition in pairs:
            if topic not in refused:
                try:
                    self.authorizer.check_topic(responder.principal, Operation.DESCRIBE, topic)
                    refused[topic] = None
                except LogferryError as exc:
                    refused[topic] = exc
            error = refused[topic]
            try:
                if error is not None:
                    raise error
                plog = self.router.leader_log(topic, partition)
                items.append(
                    {
                        "start": plog.start_offset,
                        "end": plog.visible_end,
                        "avg_message_bytes": plog.avg_message_bytes,
                        # counted, not estimated: the message offsets of both ends (a walk of
                        # at most an index interval of batch headers, none on a quiet log)
                        "start_message": plog.start_message,
                        "end_message": plog.visible_end_message,
                    }
                )
            except LogferryError as exc:
                items.append({"err": exc.code, "msg": str(exc)})
        return {"many": items}

    async def metadata(self, query: MetadataQuery, principal: Principal) -> MetadataResult:
        """The brokers, and the topics asked for (auto-created if allowed); all topics
        are those the principal may describe. Computed here once for every front end."""
        create = query.create and self.config.auto_create_topics
        view = self.view()
        topics: list[TopicResult] = []
        authorizer = self.authorizer
        asked = query.topics
        if asked is None:
            asked = [
                t for t in sorted(view.topics) if authorizer.allowed(principal, Operation.DESCRIBE, topic_resource(t))
            ]
        for topic in asked:
            try:  # before existence: a refusal does not tell whether the topic exists
                authorizer.check_topic(principal, Operation.DESCRIBE, topic)
            except LogferryError as exc:
                topics.append(TopicResult(topic, exc, [], {}, 0))
                continue
            if topic not in view.topics and create:
                try:
                    validate_topic_name(topic)
                    authorizer.check_topic(principal, Operation.CREATE, topic)
                    await self.create_in_zk(topic, self.config.num_partitions, exists_ok=True)
                except LogferryError as exc:
                    topics.append(TopicResult(topic, exc, [], {}, 0))
                    continue
                view = self.view()
            assignment = view.topics.get(topic)
            if assignment is None:
                topics.append(TopicResult(topic, UnknownTopicOrPartitionError(f"unknown topic {topic!r}"), [], {}, 0))
                continue
            parts = []
            for p, replicas in sorted(assignment.items()):
                s = view.states.get((topic, p))
                parts.append(
                    PartitionMetadata(
                        p,
                        s.leader if s else -1,
                        s.leader_epoch if s else -1,
                        replicas,
                        list(s.isr) if s else [],
                        [r for r in replicas if r not in view.brokers],
                    )
                )
            topics.append(TopicResult(topic, None, parts, view.configs.get(topic, {}), view.topic_ids.get(topic, 0)))
        # The addresses of the listener the request came on (as Kafka does): a client
        # of the external listener is sent to the other brokers' external listeners.
        # A broker without that listener is left out (a rolling change of listeners).
        brokers = []
        for b, info in sorted(view.brokers.items()):
            address = (
                ((info.kafka_host or info.host, info.kafka_port) if info.kafka_port else None)
                if query.kafka
                else info.address(query.listener)
            )
            if address is not None:
                brokers.append(BrokerNode(b, *address, info.datacenter, info.rack))
        return MetadataResult(brokers, topics, view.controller, self.config.auto_create_topics)

    async def create_topic(self, request: CreateTopicRequest, responder: Responder) -> None:
        """Create a topic in ZooKeeper; answer once this broker has seen it."""
        self.authorizer.check_topic(responder.principal, Operation.CREATE, request.topic)
        assignment = await self.create_in_zk(
            request.topic,
            request.partitions or self.config.num_partitions,
            request.replication_factor,
            request.min_insync_replicas,
            config=request.config,
        )
        responder.answer(encode_create_topic_answer(CreateTopicAnswer(assignment)))

    async def alter_topic(self, request: AlterTopicRequest, responder: Responder) -> None:
        """Change a topic's settings in ZooKeeper; every broker's watch applies them."""
        config = await self.alter_topic_config(responder.principal, request.topic, request.set, request.delete)
        responder.answer({"config": config})

    async def alter_topic_config(
        self, principal: Principal, topic: str, set_: dict[str, Any], delete: list[str]
    ) -> dict[str, Any]:
        """Set and remove ``topic``'s own settings (``alter`` on it); its new settings.
        The native AlterTopic and Kafka's IncrementalAlterConfigs both come here."""
        self.authorizer.check_topic(principal, Operation.ALTER, topic)
        config: dict[str, Any] = await asyncio.get_running_loop().run_in_executor(
            self.admin_pool,
            self.registry().alter_topic_config,  # type: ignore[union-attr]
            topic,
            set_,
            delete,
        )
        return config

    async def create_partitions(self, request: CreatePartitionsRequest, responder: Responder) -> None:
        """Grow a topic; answer once this broker has seen every new partition's state."""
        assignment = await self.grow_topic(responder.principal, request.topic, request.partitions)
        responder.answer({"partitions": assignment})

    async def grow_topic(self, principal: Principal, topic: str, partitions: int) -> dict[int, list[int]]:
        """Grow ``topic`` to ``partitions`` in all (``alter`` on it; never fewer:
        InvalidPartitionsError); its whole assignment, once this broker has seen every
        new partition's state. The native CreatePartitions and Kafka's come here."""
        self.authorizer.check_topic(principal, Operation.ALTER, topic)
        assignment: dict[int, list[int]] = await asyncio.get_running_loop().run_in_executor(
            self.admin_pool,
            self.registry().create_partitions,  # type: ignore[union-attr]
            topic,
            partitions,
        )
        await self._await_seen(topic, len(assignment))
        return assignment

    async def _await_seen(self, topic: str, partitions: int) -> None:
        """Wait (up to 5 s) until this broker's view has ``partitions`` partitions of
        ``topic``, each with a state, so a client's next metadata request sees them."""
        for _ in range(250):
            view = self.view()
            seen = view.topics.get(topic, {})
            if len(seen) >= partitions and all((topic, p) in view.states for p in seen):
                return
            await asyncio.sleep(0.02)

    async def delete_topic(self, request: DeleteTopicRequest, responder: Responder) -> None:
        """Delete a topic in ZooKeeper (each broker drops its logs when it sees that)."""
        self.authorizer.check_topic(responder.principal, Operation.DELETE, request.topic)
        await asyncio.get_running_loop().run_in_executor(self.admin_pool, self.registry().delete_topic, request.topic)  # type: ignore[union-attr]
        responder.answer({})

    async def elect_leaders(self, request: ElectLeadersRequest, responder: Responder) -> None:
        """Ask the controller to move leadership back to the preferred replicas."""
        self.authorizer.check_cluster(responder.principal, Operation.ALTER)
        client = self.zk_client()

        def trigger() -> None:
            with contextlib.suppress(zk.NodeExistsError):  # already asked; the controller deletes it when done
                client.create(zk.PREFERRED_ELECTION, b"{}", makepath=True)

        await asyncio.get_running_loop().run_in_executor(self.admin_pool, trigger)
        responder.answer(encode_elect_leaders_answer(ElectLeadersAnswer(self.view().controller)))

    async def init_producer_id(self) -> ProducerIdResult:
        """A new idempotent producer's id (from this broker's block, claimed in ZooKeeper)."""
        if self._producer_ids is None:
            self._producer_ids = ProducerIdAllocator(self.zk_client())
        pid = await asyncio.get_running_loop().run_in_executor(self.admin_pool, self._producer_ids.next_id)
        return ProducerIdResult(pid, 0)

    async def create_in_zk(
        self,
        topic: str,
        partitions: int,
        replication_factor: int = 0,
        min_insync_replicas: int | None = None,
        exists_ok: bool = False,
        config: dict[str, Any] | None = None,
    ) -> dict[int, list[int]]:
        """Create a topic (replication factor 0: the broker's default, capped at the live
        brokers) and wait, bounded, until this broker's own watch has seen it and every
        partition has a state. ``exists_ok``: another client's auto-create won the race."""
        loop = asyncio.get_running_loop()
        rf = replication_factor or min(self.config.default_replication_factor, max(len(self.view().brokers), 1))
        assignment: dict[int, list[int]] | None
        try:
            assignment = await loop.run_in_executor(
                self.admin_pool,
                self.registry().create_topic,  # type: ignore[union-attr]
                topic,
                partitions,
                rf,
                min_insync_replicas,
                config,
            )
        except TopicExistsError:
            if not exists_ok:
                raise
            assignment = None
        for _ in range(250):
            if self.shutting_down():  # the view no longer moves: answer now, not in 5 s
                raise BrokerShuttingDownError(
                    f"topic {topic!r} was created, but broker "
                    f"{self.config.broker_id} is shutting down; "
                    "retry with another broker"
                )
            view = self.view()
            seen = view.topics.get(topic)
            if seen is not None and all((topic, p) in view.states for p in seen):
                return seen
            await asyncio.sleep(0.02)
        if assignment is None:
            raise UnknownTopicOrPartitionError(f"topic {topic!r} is being created; retry")
        return assignment


def _translate(plog: PartitionLog, at: tuple[str, int]) -> OffsetsAnswer:
    """``at`` (BYTE, N) or (MESSAGE, M) in the other addressing, within the visible log
    (OffsetOutOfRangeError past the visible end, InvalidOffsetError for a byte offset
    no batch starts at)."""
    kind, value = at
    if kind == BYTE:
        offset, skip = value, None
        if offset > plog.visible_end:
            raise OffsetOutOfRangeError(
                f"offset {offset} is past the visible end {plog.visible_end} of partition {plog.name}",
                plog.start_offset,
                plog.visible_end,
            )
        message = plog.message_offset_at(offset)
    else:
        message = value
        offset, skip = plog.batch_for_message(message)
        if offset > plog.visible_end or (offset == plog.visible_end and skip):
            raise OffsetOutOfRangeError(
                f"message offset {message} is past the visible end of partition {plog.name}",
                plog.start_offset,
                plog.visible_end,
            )
    return OffsetsAnswer(offset, plog.start_offset, plog.visible_end, plog.avg_message_bytes, message, skip)


__all__ = ["AdminService"]
