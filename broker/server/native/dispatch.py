"""From a request frame to its handler: parse the typed request, run the handler,
turn what it raises into an error answer.

Produce, fetch, metadata and init_producer_id are served by services that return
typed results (:mod:`broker.server.services.results`); this module renders them as
logferry's msgpack answers (fetches with their file slices, sent with sendfile).

Produce runs synchronously (a connection's appends keep their order); every other
api runs as a task and may answer out of order. Whatever a handler raises becomes an
answer: a :class:`LogferryError` its own code, anything else error 1 plus a traceback
in the log (a bug must not take the broker down).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from broker.common.errors import LogferryError, UnknownError
from broker.server.services.admin import AdminService
from broker.server.services.append_at import AppendAtService
from broker.server.services.fetch import FetchService
from broker.server.services.produce import ProduceService
from broker.server.services.responder import Responder
from broker.server.services.results import (
    FetchResult,
    MetadataQuery,
    MetadataResult,
)
from broker.wire import protocol
from broker.wire.apis import RequestHead, parse_request
from broker.wire.fetch import FetchRequest, encode_fetch_answer
from broker.wire.metadata import (
    BrokerAddress,
    MetadataAnswer,
    MetadataRequest,
    TopicMetadata,
    encode_metadata_answer,
    topic_error,
)
from broker.wire.produce import ProduceRequest
from broker.wire.producer_id import (
    InitProducerIdAnswer,
    InitProducerIdRequest,
    encode_init_producer_id_answer,
)

log = logging.getLogger("logferry.broker")

Handler = Callable[[Any, Responder], Awaitable[None]]


class Dispatcher:
    """Routes each api to its service."""

    def __init__(self, produce: ProduceService, fetch: FetchService, admin: AdminService):
        self.produce = produce
        self.fetch = fetch
        self.admin = admin
        self.append_at = AppendAtService(produce)
        self._async: dict[int, Handler] = {
            protocol.FETCH: self.handle_fetch,
            protocol.OFFSETS: admin.offsets,
            protocol.METADATA: self.handle_metadata,
            protocol.CREATE_TOPIC: admin.create_topic,
            protocol.DELETE_TOPIC: admin.delete_topic,
            protocol.ELECT_LEADERS: admin.elect_leaders,
            protocol.ALTER_TOPIC: admin.alter_topic,
            protocol.CREATE_PARTITIONS: admin.create_partitions,
            protocol.INIT_PRODUCER_ID: self.handle_init_producer_id,
        }

    @staticmethod
    def is_synchronous(head: RequestHead) -> bool:
        """Produce and append-at are handled as they arrive; the rest run as tasks."""
        return head.api == protocol.PRODUCE or head.api == protocol.APPEND_AT

    def handle_produce(self, head: RequestHead, frame: protocol.Frame, responder: Responder) -> None:
        """Parse and run a produce (or append-at) request now."""
        try:
            request = parse_request(head, frame)
        except LogferryError as exc:
            responder.fail(exc)
            return
        if head.api == protocol.APPEND_AT:
            self.append_at.handle(request, responder)
        else:
            self.run_produce(request, responder)

    def run_produce(self, request: ProduceRequest, responder: Responder) -> None:
        """Append through the produce service; answer its result (acks=0: count it,
        and close the connection if a part failed, the only signal acks=0 has)."""
        try:
            self.produce.produce(
                request, responder.principal, responder.acks0_produce if request.acks == 0 else responder.answer_produce
            )
        except LogferryError as exc:
            responder.fail(exc)

    async def handle_fetch(self, request: FetchRequest, responder: Responder) -> None:
        """Fetch through the fetch service; answer with its file slices (sendfile)."""

        def reply(result: FetchResult) -> None:
            responder.answer_with_files(encode_fetch_answer(result.parts), result.slices, result.nbytes)

        await self.fetch.fetch(request, responder.principal, reply)

    async def handle_metadata(self, request: MetadataRequest, responder: Responder) -> None:
        """The admin service's metadata, for the listener the request came on."""
        result = await self.admin.metadata(
            MetadataQuery(request.topics, request.create, responder.listener), responder.principal
        )
        responder.answer(encode_metadata_answer(metadata_answer(result)))

    async def handle_init_producer_id(self, request: InitProducerIdRequest, responder: Responder) -> None:
        """A new idempotent producer's id."""
        result = await self.admin.init_producer_id()
        responder.answer(encode_init_producer_id_answer(InitProducerIdAnswer(result.producer_id, result.epoch)))

    async def handle(self, head: RequestHead, frame: protocol.Frame, responder: Responder) -> None:
        """Parse and run any other request; every outcome is answered."""
        responder.started = time.perf_counter()  # timed from when the task runs
        try:
            request = parse_request(head, frame)
            await self._async[head.api](request, responder)
        except LogferryError as exc:
            responder.fail(exc)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug must not take the broker down
            log.exception("%s request from %s failed", head.name, responder.peer)
            responder.fail(UnknownError(f"internal error: {exc}"))


def metadata_answer(result: MetadataResult) -> MetadataAnswer:
    """The native metadata answer of a metadata result: per topic, partition -> leader
    (-1: none right now), replicas, ISR, epochs and config."""
    topics: dict[str, TopicMetadata] = {}
    for topic in result.topics:
        if topic.error is not None:
            topics[topic.name] = topic_error(topic.error.code, str(topic.error))
            continue
        parts = topic.partitions
        topics[topic.name] = TopicMetadata(
            0,
            None,
            {p.partition: p.leader for p in parts},
            {p.partition: p.replicas for p in parts},
            {p.partition: p.isr for p in parts},
            {p.partition: p.leader_epoch for p in parts},
            topic.config,
        )
    brokers = {b.broker_id: BrokerAddress(b.host, b.port, b.datacenter, b.rack) for b in result.brokers}
    return MetadataAnswer(brokers, topics, result.controller, result.auto_create)


__all__ = ["Dispatcher", "metadata_answer"]
