"""Both front ends serve a request through the same service code: the native front end
(msgpack) and the Kafka front end (kio) each decode their protocol into the same typed
request, call the same service method, get the same typed result, and only then encode
it in their own protocol (issue 34).

Each case runs the same request through both front ends, each against a fresh broker
state (so offsets agree), and records what the service was called with and what it
returned."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from broker.common.principal import ANONYMOUS
from broker.server.kafka import convert
from broker.server.kafka.protocol import Api, Request
from broker.server.kafka.record_batch import encode_record_batch
from broker.server.kafka.service import KafkaService, _Channel
from broker.server.services.responder import Responder
from broker.server.services.results import MetadataResult, ProduceResult
from broker.wire.metadata import MetadataRequest, parse_metadata_answer
from broker.wire.produce import MessageSet, ProduceRequest, parse_produce_answer
from tests.unit.test_authorizer import Setup
from tests.unit.test_server_handlers import Channel


@pytest.fixture
def brokers(tmp_path):
    """Two fresh broker states (no ACLs: everything allowed for a super user)."""
    made = [Setup(tmp_path / name, [], super_users=["User:ANONYMOUS"]) for name in "ab"]
    yield made
    for s in made:
        s.close()


def _kafka(s: Setup) -> KafkaService:
    return KafkaService(
        s.admin.config,
        s.produce.router,
        s.produce,
        s.fetch,
        s.admin,  # type: ignore[arg-type]
        s.admin.view,
        lambda *a: None,
    )


def _spy_produce(s: Setup) -> list[tuple[ProduceRequest, ProduceResult]]:
    """Every call of ``ProduceService.produce`` with the result it delivered."""
    calls: list[tuple[ProduceRequest, ProduceResult]] = []
    real = s.produce.produce

    def produce(request: ProduceRequest, principal: Any, reply: Any) -> None:
        def record(result: ProduceResult) -> None:
            calls.append((request, result))
            reply(result)

        real(request, principal, record)

    s.produce.produce = produce  # type: ignore[method-assign]
    return calls


def _spy_metadata(s: Setup) -> list[tuple[Any, MetadataResult]]:
    calls: list[tuple[Any, MetadataResult]] = []
    real = s.admin.metadata

    async def metadata(query: Any, principal: Any) -> MetadataResult:
        result = await real(query, principal)
        calls.append((query, result))
        return result

    s.admin.metadata = metadata  # type: ignore[method-assign]
    return calls


def _responder(channel: Channel) -> Responder:
    channel.principal = ANONYMOUS  # type: ignore[misc]
    return Responder(channel, 1, "test", lambda *a: None)


def test_a_kafka_and_a_native_produce_of_one_batch_run_the_same_service_call(brokers) -> None:
    kafka_side, native_side = brokers
    batch = bytes(encode_record_batch(0, 2, 1_700_000_000_000, None, None, [b"a", b"b", b"c"]))
    stored = memoryview(convert.store_batches(batch))  # the batch as the broker keeps it

    kafka_calls = _spy_produce(kafka_side)
    body = SimpleNamespace(
        acks=1, topic_data=[SimpleNamespace(name="web-a", partition_data=[SimpleNamespace(index=0, records=batch)])]
    )
    channel = _Channel("peer", ANONYMOUS, lambda: None)
    answer = asyncio.run(_kafka(kafka_side).produce(Request(Api.PRODUCE, 9, 1, "t", body), channel))
    (topic,) = answer.responses
    (part,) = topic.partition_responses
    assert (part.error_code, part.base_offset) == (ErrorCode.none, 0)

    native_calls = _spy_produce(native_side)
    wire = Channel()
    native_side.native.run_produce(ProduceRequest(1, [MessageSet("web-a", 0, stored)], None), _responder(wire))
    (frame,) = wire.frames()
    (native_part,) = parse_produce_answer(frame.header)
    assert (native_part.error, native_part.base_offset) == (0, 0)

    # one call each, the same typed request in and the same typed result out
    (kafka_call,) = kafka_calls
    (native_call,) = native_calls
    assert kafka_call == native_call
    assert kafka_call[1] == ProduceResult([("web-a", 0, 0, 0, None)], False)
    # and the same bytes in both logs
    assert (
        kafka_side.logs.get("web-a", 0).read_bytes(0, 1 << 16)
        == native_side.logs.get("web-a", 0).read_bytes(0, 1 << 16)
        == bytes(stored)
    )


def test_a_kafka_and_a_native_metadata_request_share_one_computed_result(brokers) -> None:
    kafka_side, native_side = brokers
    kafka_calls = _spy_metadata(kafka_side)
    body = SimpleNamespace(
        topics=[SimpleNamespace(name="web-a"), SimpleNamespace(name="nosuch")], allow_auto_topic_creation=False
    )
    answer = asyncio.run(
        _kafka(kafka_side).metadata(Request(Api.METADATA, 9, 1, "t", body), _Channel("peer", ANONYMOUS, lambda: None))
    )
    web_a, nosuch = answer.topics
    assert (web_a.name, web_a.error_code) == ("web-a", ErrorCode.none)
    assert [(p.partition_index, p.replica_nodes, p.isr_nodes) for p in web_a.partitions] == [(0, (1,), (1,))]
    assert nosuch.error_code == ErrorCode.unknown_topic_or_partition

    native_calls = _spy_metadata(native_side)
    wire = Channel()
    asyncio.run(native_side.native.handle_metadata(MetadataRequest(["web-a", "nosuch"], False), _responder(wire)))
    (frame,) = wire.frames()
    native = parse_metadata_answer(frame.header)
    assert native.topics["web-a"].replicas == {0: [1]}
    assert native.topics["nosuch"].error != 0

    (kafka_call,) = kafka_calls
    (native_call,) = native_calls
    # the same question (but for the listener it came on) and the same topics computed
    assert (kafka_call[0].topics, kafka_call[0].create) == (native_call[0].topics, native_call[0].create)
    assert (kafka_call[0].kafka, native_call[0].kafka) == (True, False)
    kafka_result, native_result = kafka_call[1], native_call[1]
    assert kafka_result.controller == native_result.controller
    assert [t[:1] + t[2:] for t in kafka_result.topics] == [t[:1] + t[2:] for t in native_result.topics]
    assert [type(t.error) for t in kafka_result.topics] == [type(t.error) for t in native_result.topics]
