"""CreatePartitions without sockets: grows through the admin, refuses manual
assignments, checks only with validate_only, answers every version."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from broker.common.errors import InvalidPartitionsError
from broker.common.principal import Principal
from broker.coordination.registry import ClusterView
from broker.server.kafka import protocol
from broker.server.kafka.partitions import KafkaPartitions
from broker.server.kafka.protocol import Api
from broker.server.security.authorizer import Authorizer, AuthorizerConfig


class Channel:
    principal = Principal("User", "alice")


def ask(version: int, topics: list[tuple[str, int, bool]], validate_only: bool = False) -> tuple[Any, list[Any]]:
    """Answer a CreatePartitions of ``(topic, count, with_assignment)``; also the calls
    the admin got (it has topic ``logs`` with 2 partitions)."""
    grown: list[tuple[str, int]] = []

    async def grow_topic(principal: Principal, name: str, count: int) -> dict[int, list[int]]:
        if count <= 2:
            raise InvalidPartitionsError(f"{name} has 2 partitions")
        grown.append((name, count))
        return {p: [1] for p in range(count)}

    view = ClusterView(topics={"logs": {0: [1], 1: [1]}})
    service = KafkaPartitions(grow_topic, lambda: view, Authorizer(AuthorizerConfig()))
    schema = load_request_schema(Api.CREATE_PARTITIONS, version)
    module = __import__(schema.__module__, fromlist=["x"])
    body = schema(
        topics=tuple(
            module.CreatePartitionsTopic(
                name=name,
                count=count,
                assignments=(module.CreatePartitionsAssignment(broker_ids=(1,)),) if manual else None,
            )
            for name, count, manual in topics
        ),
        timeout=timedelta(seconds=5),
        validate_only=validate_only,
    )
    answer = asyncio.run(
        service.create_partitions(protocol.Request(Api.CREATE_PARTITIONS, version, 1, "t", body), Channel())
    )
    protocol.encode_response(Api.CREATE_PARTITIONS, version, 1, answer)  # it encodes
    return answer, grown


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_grows_through_the_admin_and_answers_per_topic(version: int) -> None:
    answer, grown = ask(version, [("logs", 4, False), ("logs", 2, False), ("logs", 5, True)])
    assert [r.error_code for r in answer.results] == [
        ErrorCode.none,
        ErrorCode.invalid_partitions,
        ErrorCode.invalid_request,  # logferry places replicas itself
    ]
    assert grown == [("logs", 4)]


def test_validate_only_checks_and_grows_nothing() -> None:
    answer, grown = ask(3, [("logs", 4, False), ("logs", 2, False), ("nope", 3, False)], validate_only=True)
    assert [r.error_code for r in answer.results] == [
        ErrorCode.none,
        ErrorCode.invalid_partitions,
        ErrorCode.unknown_topic_or_partition,
    ]
    assert grown == []
    assert protocol.SUPPORTED[Api.CREATE_PARTITIONS] == (0, 3)
