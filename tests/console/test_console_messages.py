"""The messages view's offsets and search against a real broker (no browser): every
message numbered as Kafka clients number it, a page started from such an offset, and a
search bounded by what the page reads."""

from __future__ import annotations

import pytest

from broker.client import Producer, SimpleConsumer
from broker.common.errors import InvalidOffsetError, OffsetOutOfRangeError
from console import messages
from console.messages import MessageStart, browse, tail
from tests.support import waiting

pytestmark = pytest.mark.integration

COUNTS = [3, 1, 7, 2, 5]
"""Messages per batch: message offsets are not a batch's index nor its bytes."""


def _produce(zk: str, topic: str) -> list[bytes]:
    values = []
    with Producer(zk=zk, linger_ms=0) as producer:
        for b, count in enumerate(COUNTS):
            batch = [
                b"b%d-m%d %s" % (b, j, b"needle" if (b, j) in {(0, 1), (2, 6), (4, 0)} else b"hay")
                for j in range(count)
            ]
            producer.send(topic, batch, partition=0).wait(30)
            values += batch
    with SimpleConsumer(zk=zk) as consumer:  # acknowledged is not yet visible (flushed)
        waiting.wait_until(
            lambda: consumer.offset_infos([(topic, 0)])[(topic, 0)]["end_message"] == len(values), 30, "all visible"
        )
    return values


def test_the_broker_translates_byte_offsets_and_message_offsets(module_cluster, unique_name):
    topic = unique_name("kafka-offsets")
    _produce(module_cluster.zk_connect, topic)
    with SimpleConsumer(zk=module_cluster.zk_connect) as consumer:
        batches = consumer.fetch(topic, 0, 0).batches
        assert [len(b) for b in batches] == COUNTS
        before = 0
        for batch in batches:
            assert consumer.message_offset_at(topic, 0, batch.offset) == before
            for i in range(len(batch)):
                assert consumer.position_of_message(topic, 0, before + i) == (batch.offset, i)
            before += len(batch)
        end = consumer.offsets(topic, 0).end
        assert consumer.message_offset_at(topic, 0, end) == sum(COUNTS)
        assert consumer.position_of_message(topic, 0, sum(COUNTS)) == (end, 0)
        with pytest.raises(InvalidOffsetError):
            consumer.message_offset_at(topic, 0, batches[1].offset + 1)
        with pytest.raises(OffsetOutOfRangeError):
            consumer.message_offset_at(topic, 0, end + 100)
        with pytest.raises(OffsetOutOfRangeError):
            consumer.position_of_message(topic, 0, sum(COUNTS) + 1)


def test_pages_carry_kafka_offsets_and_a_search_is_bounded(module_cluster, unique_name, monkeypatch):
    topic = unique_name("browse")
    values = _produce(module_cluster.zk_connect, topic)
    total = len(values)
    with SimpleConsumer(zk=module_cluster.zk_connect) as consumer:
        # pages of 4 cross batches and end inside them: offsets go on 0, 1, 2, ... unbroken
        seen: list[int] = []
        page = browse(consumer, topic, 0, "earliest", limit=4)
        while True:
            assert page["start_message"] == len(seen)
            seen += [m["message_offset"] for m in page["messages"]]
            assert [m["value"] for m in page["messages"]] == [
                v.decode() for v in values[page["start_message"] : len(seen)]
            ]
            if page["next"] >= page["log_end"]:
                break
            page = browse(consumer, topic, 0, page["next"], limit=4, skip=page["next_skip"])
        assert seen == list(range(total))
        # from a message offset, as a Kafka client would ask
        page = browse(consumer, topic, 0, MessageStart(5), limit=3)
        assert [m["message_offset"] for m in page["messages"]] == [5, 6, 7]
        assert [m["value"] for m in page["messages"]] == [v.decode() for v in values[5:8]]

        found = browse(consumer, topic, 0, "earliest", limit=50, query="NEEDLE")
        assert [(m["message_offset"], m["value"]) for m in found["messages"]] == [
            (i, v.decode()) for i, v in enumerate(values) if b"needle" in v
        ]
        assert found["scanned"] == total and found["next"] == found["log_end"]
        # bounded: a search reads at most MAX_SCAN messages a page and says where it stopped
        monkeypatch.setattr(messages, "MAX_SCAN", 5)
        first = browse(consumer, topic, 0, "earliest", query="needle")
        assert first["scanned"] == 5 and first["next_message"] == 5
        assert [m["message_offset"] for m in first["messages"]] == [1]
        rest = browse(consumer, topic, 0, first["next"], skip=first["next_skip"], query="needle")
        assert rest["start_message"] == 5 and rest["messages"] == [] and rest["next_message"] == 10
        last = browse(consumer, topic, 0, rest["next"], skip=rest["next_skip"], query="needle")
        assert [m["message_offset"] for m in last["messages"]] == [10, 13]

        rows, offset, message = tail(consumer, topic, 0, 0, 0)
        assert [r["message_offset"] for r in rows] == list(range(total)) and message == total
