"""The broker's request handlers, without sockets: a typed request and a responder in,
answer frames out. Real partition logs in a temporary directory; replication is a
stand-in that leads every partition alone."""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import msgpack

from broker.common.errors import CorruptBatchError, InvalidRequestError, NotLeaderError
from broker.common.metrics import Metrics
from broker.common.principal import ANONYMOUS
from broker.coordination.partition_state import PartitionState
from broker.coordination.registry import ClusterView
from broker.server.broker_metrics import BrokerMetrics
from broker.server.durability.flusher import Flusher
from broker.server.native.dispatch import Dispatcher
from broker.server.services.fetch import FetchService
from broker.server.services.produce import ProduceService
from broker.server.services.responder import FileReply, Responder
from broker.server.services.routing import PartitionRouter
from broker.storage.config import LogConfig
from broker.storage.log_manager import LogManager
from broker.wire import apis, protocol, records
from broker.wire.fetch import FetchPart, encode_fetch_request, parse_fetch_answer, payload_slices
from broker.wire.produce import parse_produce_answer


class Channel:
    """Collects what a responder sends."""

    peer = "127.0.0.1:1"
    principal = ANONYMOUS

    def __init__(self) -> None:
        self.sent: list = []
        self.closed = False

    def send(self, item) -> None:
        self.sent.append(item)

    def close(self) -> None:
        self.closed = True

    def frames(self) -> list[protocol.Frame]:
        decoder = protocol.FrameDecoder()
        for item in self.sent:
            if isinstance(item, FileReply):
                decoder.feed(item.head)
                for piece in item.slices:
                    decoder.feed(os.pread(piece.file.fileno(), piece.count, piece.position))
            else:
                decoder.feed(item)
        out = []
        while (frame := decoder.next_frame()) is not None:
            out.append(frame)
        return out


def _services(tmp_path, flush_messages: int, visibility: str = "flushed"):
    logs = LogManager([tmp_path], LogConfig(flush_messages=flush_messages, flush_ms=60_000, visibility=visibility))
    logs.load()
    logs.create("t", 0)
    view = ClusterView(
        topics={"t": {0: [1], 1: [2]}}, states={("t", 1): PartitionState(leader=2, leader_epoch=1, isr=(2,))}
    )
    replication = SimpleNamespace(
        leader_log=lambda topic, partition, for_write=False, acks_all=False: logs.get(topic, partition),
        check_acks_all=lambda topic, partition: None,
        wait_for_replicas=lambda *args: False,
        on_publishable=lambda key: None,
        role_counts=lambda: {},
        under_replicated=lambda: [],
        replicas={},
    )
    metrics = BrokerMetrics(Metrics(), logs, set(), lambda: replication, lambda: None)
    router = PartitionRouter(1, replication, lambda: view)
    fetch = FetchService(router, replication, logs, metrics, lambda: False)
    pool = ThreadPoolExecutor(1)
    flusher = Flusher(logs, 60_000, pool, fetch.wake_consumers, replication.on_publishable)
    produce = ProduceService(router, replication, logs, flusher, fetch, metrics, flush_messages == 1, lambda: False)
    dispatcher = Dispatcher(
        produce,
        fetch,
        SimpleNamespace(
            offsets=None,
            metadata=None,
            create_topic=None,
            delete_topic=None,
            elect_leaders=None,
            alter_topic=None,
            create_partitions=None,
            init_producer_id=None,
        ),
    )
    return dispatcher, metrics, logs, pool


def _request(api: int, corr: int, fields: dict, payload: bytes = b"") -> tuple:
    head = apis.parse_request_head({"api": api, "v": 1, "id": corr, **fields})
    return head, protocol.Frame(
        msgpack.unpackb(msgpack.packb({"api": api, "v": 1, "id": corr, **fields}), strict_map_key=False),
        memoryview(payload),
    )


async def _produce_then_fetch(tmp_path):
    dispatcher, metrics, logs, pool = _services(tmp_path, flush_messages=1)
    good = records.encode_batch([b"a", b"b"], None, 1)
    bad = bytearray(good)
    bad[-1] ^= 0xFF
    channel = Channel()
    head, frame = _request(
        protocol.PRODUCE,
        1,
        {"acks": 1, "parts": [["t", 0, len(good)], ["t", 0, len(bad)], ["t", 1, len(good)], ["t", "x", 1]]},
        good + bytes(bad) + good + b"z",
    )
    dispatcher.handle_produce(head, frame, Responder(channel, 1, head.name, metrics.count_request))
    assert channel.sent == []  # flush_messages = 1: answered after the fsync
    for _ in range(200):
        if channel.sent:
            break
        await asyncio.sleep(0.01)
    (answer,) = channel.frames()
    parts = parse_produce_answer(answer.header)
    assert [(p.error, p.base_offset) for p in parts] == [
        (0, 0),
        (CorruptBatchError.code, -1),
        (NotLeaderError.code, -1),
        (InvalidRequestError.code, -1),
    ]
    assert "CRC" in parts[1].message and parts[3].partition == "x"
    assert logs.get("t", 0).visible_end == len(good)
    rendered = metrics.registry.render()  # per-error labels render (they used to crash)
    assert 'logferry_produce_errors_total{error="CorruptBatchError"} 1' in rendered
    assert 'logferry_produce_errors_total{error="InvalidRequestError"} 1' in rendered

    channel = Channel()
    fields = encode_fetch_request([FetchPart("t", 0, 0, 1 << 20), FetchPart("t", 1, 0, 100)], 0, 1)
    head, frame = _request(protocol.FETCH, 2, fields)
    await dispatcher.handle(head, frame, Responder(channel, 2, head.name, metrics.count_request))
    (answer,) = channel.frames()
    parts = parse_fetch_answer(answer.header)
    data = payload_slices(parts, answer.payload)
    assert (parts[0].error, parts[0].visible_end, bytes(data[0])) == (0, len(good), good)
    assert parts[1].error == NotLeaderError.code and "led by broker 2" in parts[1].message

    channel = Channel()
    head, frame = _request(protocol.FETCH, 3, {**fields, "max_wait_ms": {"ms": 5}})
    await dispatcher.handle(head, frame, Responder(channel, 3, head.name, metrics.count_request))
    (answer,) = channel.frames()
    assert answer.header["err"] == InvalidRequestError.code
    assert "max_wait_ms" in answer.header["msg"]
    assert metrics.requests[(("api", "fetch"),)] == 2
    assert metrics.request_errors[(("api", "fetch"),)] == 1
    pool.shutdown()
    logs.close()


def test_produce_and_fetch_handlers_answer_through_the_responder(tmp_path):
    asyncio.run(_produce_then_fetch(tmp_path))


async def _long_poll_is_woken_by_a_flush(tmp_path):
    dispatcher, metrics, logs, pool = _services(tmp_path, flush_messages=10_000)
    channel = Channel()
    fields = encode_fetch_request([FetchPart("t", 0, 0, 1 << 20)], 5_000, 1)
    head, frame = _request(protocol.FETCH, 1, fields)
    polling = asyncio.ensure_future(
        dispatcher.handle(head, frame, Responder(channel, 1, head.name, metrics.count_request))
    )
    await asyncio.sleep(0.05)
    assert not polling.done() and channel.sent == []
    batch = records.encode_batch([b"late"], None, 1)
    head, frame = _request(protocol.PRODUCE, 2, {"acks": 0, "parts": [["t", 0, len(batch)]]}, batch)
    produced = Channel()
    dispatcher.handle_produce(head, frame, Responder(produced, 2, head.name, metrics.count_request))
    assert produced.sent == [] and not produced.closed  # acks 0: no answer
    await dispatcher.produce.flusher.flush(("t", 0), logs.get("t", 0))
    await asyncio.wait_for(polling, 2.0)
    (answer,) = channel.frames()
    (part,) = parse_fetch_answer(answer.header)
    assert part.nbytes == len(batch) and bytes(answer.payload) == batch
    pool.shutdown()
    logs.close()


def test_a_long_poll_is_answered_when_a_flush_makes_data_visible(tmp_path):
    asyncio.run(_long_poll_is_woken_by_a_flush(tmp_path))


async def _wake_answers_at_once(tmp_path):
    dispatcher, metrics, logs, pool = _services(tmp_path, flush_messages=10_000)
    fetch = dispatcher.produce.fetch
    channel = Channel()
    fields = encode_fetch_request([FetchPart("t", 0, 0, 1 << 20)], 5_000, 1)
    head, frame = _request(protocol.FETCH, 1, fields)
    polling = asyncio.ensure_future(
        dispatcher.handle(head, frame, Responder(channel, 1, head.name, metrics.count_request))
    )
    await asyncio.sleep(0.05)
    plog = logs.get("t", 0)
    batch = records.encode_batch([b"now"], None, 1)
    plog.append(batch, 1)
    fetch.wake_consumers(("t", 0))  # appended, not flushed: nothing to read, no answer
    assert channel.sent == []
    await asyncio.sleep(0.01)
    assert not polling.done()  # the task read again and waits again
    plog.prepare_flush().run()
    plog.mark_flushed(plog.end_offset)
    fetch.wake_consumers(("t", 0))  # visible now: answered inside the wake-up, no await
    (answer,) = channel.frames()
    (part,) = parse_fetch_answer(answer.header)
    assert part.nbytes == len(batch) and bytes(answer.payload) == batch
    await asyncio.wait_for(polling, 2.0)
    assert len(channel.sent) == 1  # the task ended without answering again
    assert metrics.bytes_out[("t", 0)] == len(batch)
    pool.shutdown()
    logs.close()


def test_a_long_poll_is_answered_by_the_wake_up_itself(tmp_path):
    asyncio.run(_wake_answers_at_once(tmp_path))


class FlushedEndAtAnswer(Channel):
    """Notes the partition's flushed end when an answer is sent, and who answered when
    (``order``, shared by the channels of one test)."""

    def __init__(self, plog, name: str, order: list[str]) -> None:
        super().__init__()
        self.plog = plog
        self.name = name
        self.order = order
        self.flushed_end_seen: list[int] = []

    def send(self, item) -> None:
        self.flushed_end_seen.append(self.plog.flushed_end)
        self.order.append(self.name)
        super().send(item)


async def _written_visibility_answers_before_the_fsync(tmp_path):
    dispatcher, metrics, logs, pool = _services(tmp_path, flush_messages=10_000, visibility="written")
    plog = logs.get("t", 0)
    order: list[str] = []
    consumer = FlushedEndAtAnswer(plog, "consumer", order)
    fields = encode_fetch_request([FetchPart("t", 0, 0, 1 << 20)], 5_000, 1)
    head, frame = _request(protocol.FETCH, 1, fields)
    polling = asyncio.ensure_future(
        dispatcher.handle(head, frame, Responder(consumer, 1, head.name, metrics.count_request))
    )
    await asyncio.sleep(0.05)
    assert consumer.sent == []
    batches = [records.encode_batch([b"m%d" % i], None, 1) for i in range(3)]
    producer = FlushedEndAtAnswer(plog, "producer", order)
    head, frame = _request(
        protocol.PRODUCE, 2, {"acks": 1, "parts": [["t", 0, len(b)] for b in batches]}, b"".join(batches)
    )
    dispatcher.handle_produce(head, frame, Responder(producer, 2, head.name, metrics.count_request))
    # Within the produce handler, no await: the consumer's answer first, then the
    # producer's, both before any fsync published anything.
    assert order == ["consumer", "producer"]
    assert producer.flushed_end_seen == [0] and consumer.flushed_end_seen == [0]
    (answer,) = consumer.frames()
    (part,) = parse_fetch_answer(answer.header)
    assert bytes(answer.payload) == b"".join(batches) and part.visible_end == plog.end_offset
    await asyncio.wait_for(polling, 2.0)
    await dispatcher.produce.flusher.flush(("t", 0), plog)  # the fsync still follows
    assert plog.flushed_end == plog.end_offset == sum(map(len, batches))
    pool.shutdown()
    logs.close()


def test_written_visibility_answers_a_long_poll_before_the_fsync(tmp_path):
    asyncio.run(_written_visibility_answers_before_the_fsync(tmp_path))
