"""Kafka batches stored as they arrived (magic 3) next to logferry's own in one segment:
both protocols read everything, in order, keys, headers and timestamps kept
(docs/kafka.md, "How Kafka batches are stored")."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Producer as RdProducer
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition

from broker.client import Producer, SimpleConsumer
from tests.integration.test_kafka_clients import (
    consumer_batches,
    rd_consume,
)

pytestmark = pytest.mark.integration

N = 200


def _rd_produce(bootstrap: str, tag: str, **config: Any) -> None:
    producer = RdProducer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, **config})
    for i in range(N):
        producer.produce(
            "cross",
            value=f"{tag}-{i}".encode(),
            key=f"k{i % 3}".encode(),
            partition=0,
            headers=[("src", tag.encode()), ("i", str(i).encode())],
            timestamp=1_700_000_000_000 + i,
        )
    assert producer.flush(30) == 0


def test_kafka_and_native_batches_share_a_partition_and_both_read_all(kafka_cluster: Any) -> None:
    cluster = kafka_cluster(1)
    cluster.create_topic("cross", 1)
    _rd_produce(cluster.bootstrap, "rd")  # stored as it came: magic 3
    native = Producer(brokers=cluster.native, acks=1, idempotence=False)  # magic 1
    for i in range(N):
        native.send("cross", [f"native-{i}".encode()], key=b"agent", partition=0)
    native.flush(30)
    native.close()
    idempotent = Producer(brokers=cluster.native, acks="all", idempotence=True)  # magic 2
    for i in range(N):
        idempotent.send("cross", [f"idem-{i}".encode()], partition=0)
    idempotent.flush(30)
    idempotent.close()
    _rd_produce(cluster.bootstrap, "gz", **{"compression.type": "gzip", "enable.idempotence": True})
    expected = [f"{tag}-{i}".encode() for tag in ("rd", "native", "idem", "gz") for i in range(N)]

    # the partition's one segment holds all three stored formats
    batches = consumer_batches(cluster, "cross")
    segments = list((cluster.brokers[0].log_dir / "cross-0").glob("*.log"))
    assert len(segments) == 1
    raw_log = segments[0].read_bytes()
    positions: list[int] = []
    pos = 0
    while pos < len(raw_log):
        positions.append(raw_log[pos + 4])
        pos += 4 + int.from_bytes(raw_log[pos : pos + 4], "big")
    assert set(positions) == {1, 2, 3}, positions

    # logferry's consumer: values in order, keys, headers and timestamps of Kafka records
    reader = SimpleConsumer(brokers=cluster.native)
    try:
        got = list(reader.messages("cross", 0, follow=True, limit=4 * N, timeout=10))
    finally:
        reader.close()
    assert [m.value for m in got] == expected
    assert [m.key for m in got[:N]] == [f"k{i % 3}".encode() for i in range(N)]
    assert all(m.key == b"agent" for m in got[N : 2 * N])
    headers = [h for b in batches for h in (b.headers or [None] * len(b))]
    assert headers[:N] == [[[b"src", b"rd"], [b"i", str(i).encode()]] for i in range(N)]
    assert headers[N : 3 * N] == [None] * (2 * N)
    assert [t for b in batches for t in b.timestamps][:N] == [1_700_000_000_000 + i for i in range(N)]

    # librdkafka and kafka-python: everything in order, message offsets 0..4N-1 across
    # the three stored formats, keys and headers
    for messages in (rd_consume(cluster.bootstrap, "cross", 1, 4 * N), _kp_consume(cluster)):
        values = [_value(m) for m in messages]
        assert values == expected
        offsets = [_offset(m) for m in messages]
        assert offsets == list(range(4 * N))
        assert [_key(m) for m in messages[N : 2 * N]] == [b"agent"] * N
        assert [_key(m) for m in messages[:N]] == [f"k{i % 3}".encode() for i in range(N)]
        assert [_headers(m) for m in messages[3 * N :]] == [[("src", b"gz"), ("i", str(i).encode())] for i in range(N)]


def _kp_consume(cluster: Any) -> list[Any]:
    consumer = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap,
        enable_auto_commit=False,
        consumer_timeout_ms=5000,
        auto_offset_reset="earliest",
    )
    consumer.assign([KpTopicPartition("cross", 0)])
    deadline = time.monotonic() + 30
    out: list[Any] = []
    while len(out) < 4 * N and time.monotonic() < deadline:
        for records in consumer.poll(500).values():
            out.extend(records)
    consumer.close()
    return out


def _value(m: Any) -> bytes:
    return bytes(m.value() if callable(m.value) else m.value)


def _offset(m: Any) -> int:
    return int(m.offset() if callable(m.offset) else m.offset)


def _key(m: Any) -> bytes | None:
    return m.key() if callable(m.key) else m.key


def _headers(m: Any) -> list[tuple[str, bytes]]:
    return list(m.headers() if callable(m.headers) else m.headers)
