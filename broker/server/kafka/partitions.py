"""CreatePartitions (Kafka api 37, v0-v3): grow topics for Kafka's admin clients.

``kafka-topics --alter --partitions N`` and the Admin clients' ``createPartitions`` come
here; the work is the native admin's (``logferry topic alter NAME --partitions N``):
the new partitions are placed as at creation, with the topic's replication factor, and
the answer waits until this broker has seen their states. Per topic, as Kafka answers:
fewer partitions than the topic has, or as many, is INVALID_PARTITIONS; a manual
replica assignment INVALID_REQUEST (logferry places replicas itself, as CreateTopics
here refuses one); ``validate_only`` checks and changes nothing. Authorization:
``alter`` on the topic, as natively.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from broker.common.acl import Operation
from broker.common.errors import InvalidPartitionsError, LogferryError, UnknownTopicOrPartitionError
from broker.common.principal import Principal
from broker.coordination.registry import ClusterView
from broker.server.kafka.errors import kafka_error
from broker.server.kafka.protocol import Api, Request, make, response_schema
from broker.server.security.authorizer import Authorizer

GrowTopic = Callable[[Principal, str, int], Awaitable[dict[int, list[int]]]]
"""The admin's ``grow_topic(principal, topic, partitions)``."""


class KafkaPartitions:
    """Answers CreatePartitions through the admin's ``grow_topic``."""

    def __init__(self, grow_topic: GrowTopic, view: Callable[[], ClusterView], authorizer: Authorizer):
        self.grow_topic = grow_topic
        self.view = view
        self.authorizer = authorizer

    async def create_partitions(self, request: Request, channel: Any) -> Any:
        """One result per topic: grown to its ``count``, or the error that left it as it was."""
        v = request.version
        result_cls = response_schema(Api.CREATE_PARTITIONS, v, "CreatePartitionsTopicResult")
        results = []
        for topic in request.body.topics:
            error, message = ErrorCode.none, None
            try:
                if topic.assignments:
                    error = ErrorCode.invalid_request
                    message = "manual replica assignments are not taken; logferry places new partitions itself"
                elif request.body.validate_only:
                    self._check(channel.principal, topic.name, topic.count)
                else:
                    await self.grow_topic(channel.principal, topic.name, topic.count)
            except LogferryError as exc:
                error, message = kafka_error(exc), str(exc)
            results.append(make(result_cls, name=topic.name, error_code=error, error_message=message))
        return make(response_schema(Api.CREATE_PARTITIONS, v), throttle_time=timedelta(0), results=tuple(results))

    def _check(self, principal: Principal, name: str, count: int) -> None:
        """What ``grow_topic`` would refuse, from the cluster view (``validate_only``)."""
        self.authorizer.check_topic(principal, Operation.ALTER, name)
        current = self.view().topics.get(name)
        if current is None:
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
        if count <= len(current):
            raise InvalidPartitionsError(f"topic {name!r} has {len(current)} partitions; asked for {count}")


__all__ = ["KafkaPartitions"]
