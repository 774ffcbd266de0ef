"""What Kafka clients broke on (issue 35, "the other breaks"), against real brokers with a
Kafka listener and a real ZooKeeper: confluent-kafka's (librdkafka's) ``list_topics()``
and regex subscriptions, a message over the broker's ``max_message_bytes``, and record
headers through ``logferry produce`` and ``logferry consume --output json``.
The byte-level cases are in tests/unit/test_kafka_breaks.py and test_cli_headers.py."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from confluent_kafka import Consumer as RdConsumer
from confluent_kafka import KafkaError
from confluent_kafka import Producer as RdProducer
from confluent_kafka.admin import AdminClient

from tests.support.cli import logferry

pytestmark = pytest.mark.integration


def _broker_log(cluster: Any) -> str:
    return "\n".join(b.log_file.read_text(errors="replace") for b in cluster.brokers)


def test_librdkafka_list_topics_and_a_regex_subscription(kafka_cluster: Any) -> None:
    cluster = kafka_cluster(1)
    for topic, partitions in (("logs-web", 2), ("logs-app", 1), ("metrics", 1)):
        cluster.create_topic(topic, partitions)
    # AdminClient.list_topics() sends Metadata v12 for every topic with librdkafka's
    # 4-byte empty topic array; it failed with "Broker transport failure" before
    listed = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(timeout=15)
    assert {"logs-web", "logs-app", "metrics"} <= set(listed.topics)
    assert len(listed.topics["logs-web"].partitions) == 2
    assert all(t.error is None for t in listed.topics.values())

    producer = RdProducer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 5})
    for i in range(30):
        producer.produce(("logs-web", "logs-app", "metrics")[i % 3], value=f"m{i}".encode())
    assert producer.flush(30) == 0

    # a regex subscription learns its topics from the same every-topic Metadata request
    consumer = RdConsumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "regex",
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    got: dict[str, set[bytes]] = {}
    try:
        consumer.subscribe(["^logs-.*"])
        deadline = time.monotonic() + 45
        while sum(map(len, got.values())) < 20 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.setdefault(msg.topic(), set()).add(msg.value())
    finally:
        consumer.close()
    assert got == {
        "logs-web": {f"m{i}".encode() for i in range(0, 30, 3)},
        "logs-app": {f"m{i}".encode() for i in range(1, 30, 3)},
    }
    assert "past its body" not in _broker_log(cluster)
    assert "closing Kafka connection" not in _broker_log(cluster)


def test_a_message_over_max_message_bytes_fails_fast_and_the_producer_goes_on(kafka_cluster: Any) -> None:
    cluster = kafka_cluster(1, max_message_bytes=100_000)
    cluster.create_topic("big", 1)
    producer = RdProducer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "message.max.bytes": 10_000_000,  # the client lets it through; the broker decides
            "message.timeout.ms": 60_000,  # a timeout would take a minute
            "linger.ms": 0,
            "acks": "all",
        }
    )
    reports: list[tuple[Any, float]] = []

    def report(err: Any, msg: Any) -> None:
        reports.append((err, time.monotonic()))

    producer.poll(0)
    started = time.monotonic()
    producer.produce("big", value=b"x" * 500_000, on_delivery=report)
    assert producer.flush(30) == 0
    ((err, at),) = reports
    assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE, err
    elapsed = at - started
    print(f"MSG_SIZE_TOO_LARGE reached the client after {elapsed:.3f} s")
    assert elapsed < 10, elapsed  # answered, not timed out (message.timeout.ms is 60 s)

    # the same producer, and its connection, go on
    producer.produce("big", value=b"small", on_delivery=report)
    assert producer.flush(30) == 0
    err, _ = reports[1]
    assert err is None, err
    log = _broker_log(cluster)
    assert "closing Kafka connection" not in log
    assert log.count("over the broker's max_message_bytes (100000)") == 1


def test_headers_through_logferry_produce_and_consume_json_and_kafka_clients(kafka_cluster: Any) -> None:
    cluster = kafka_cluster(1)
    cluster.create_topic("hdr", 1)
    brokers = ",".join(cluster.native)
    produced = logferry(
        "produce", "hdr", "--brokers", brokers, "-H", "trace=4bf9", "-H", "empty=", "-H", "trace=again",
        stdin="one\ntwo\n",
    )  # fmt: skip
    assert produced.returncode == 0, produced.stderr
    assert "produced 2 messages to hdr" in produced.stderr

    # a Kafka producer's headers, binary and null values included
    rd = RdProducer({"bootstrap.servers": cluster.bootstrap})
    rd.produce("hdr", value=b"three", headers=[("sig", b"\x00\xff"), ("gone", None)])
    assert rd.flush(30) == 0

    consumed = logferry("consume", "hdr", "--brokers", brokers, "--output", "json", "-n", "3")
    assert consumed.returncode == 0, consumed.stderr
    lines = [json.loads(line) for line in consumed.stdout.splitlines()]
    assert [(m["value"], m["headers"]) for m in lines] == [
        ("one", [{"key": "trace", "value": "4bf9"}, {"key": "empty", "value": ""}, {"key": "trace", "value": "again"}]),
        ("two", [{"key": "trace", "value": "4bf9"}, {"key": "empty", "value": ""}, {"key": "trace", "value": "again"}]),
        ("three", [{"key": "sig", "value_b64": "AP8="}, {"key": "gone", "value": None}]),
    ]

    # and a Kafka consumer sees the CLI's headers as Kafka headers
    consumer = RdConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": "hdr", "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe(["hdr"])
        seen = []
        deadline = time.monotonic() + 30
        while len(seen) < 3 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is None, msg.error()
                seen.append((msg.value(), msg.headers()))
    finally:
        consumer.close()
    assert seen[0] == (b"one", [("trace", b"4bf9"), ("empty", b""), ("trace", b"again")])
    assert seen[2] == (b"three", [("sig", b"\x00\xff"), ("gone", None)])
