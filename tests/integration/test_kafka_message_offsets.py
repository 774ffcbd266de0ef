"""Kafka offsets are message offsets (docs/kafka.md, "Offsets"; issue 35), with clients
nobody here wrote against real brokers and a real ZooKeeper: confluent-kafka
(librdkafka), Debian's kcat, kafka-python's admin client.

Messages produced in batches of varied sizes have offsets 0..N-1; ``kcat -o -100``
reads exactly the last 100; ListOffsets, committed offsets and lag count messages,
also after a restart and after retention; a log written before message offsets
(no ``.index`` files) and a group commit stored then (a byte offset) keep working."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer as RdProducer
from confluent_kafka import TopicPartition
from kafka import KafkaAdminClient
from kafka import TopicPartition as KpTopicPartition
from kafka.admin import OffsetSpec

from broker.client import Admin
from broker.wire import records
from tests.integration.test_kafka_clients import rd_consume, rd_group_consumer
from tests.integration.test_kafka_positions import consume
from tests.integration.test_kafka_tools import kcat
from tests.support.brokers import KAFKA_LISTENER, KafkaCluster

pytestmark = pytest.mark.integration

N = 1000
SIZES = [1, 7, 50, 3, 200, 13, 90, 2, 120, 31]
"""Messages per produce request: a batch each, of varied sizes."""


@pytest.fixture(scope="module")
def module_cluster_options() -> dict[str, Any]:
    """The broker the module's tests share speaks Kafka too, as ``kafka_cluster(1)``'s."""
    return {"kafka": KAFKA_LISTENER}


def produce_batches(bootstrap: str, topic: str, first: int, n: int) -> None:
    """Produce values ``first``..``first + n - 1`` to partition 0 with acks=all, one
    request (batch) per :data:`SIZES` group."""
    producer = RdProducer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 1000})
    failed: list[Any] = []
    i, sizes = first, iter(SIZES * (n // len(SIZES) + 1))
    while i < first + n:
        for _ in range(min(next(sizes), first + n - i)):
            producer.produce(
                topic,
                value=b"%06d-" % i + b"x" * 100,
                partition=0,
                on_delivery=lambda err, _msg: err and failed.append(err),
            )
            i += 1
        assert producer.flush(30) == 0
    assert not failed, failed


def value_of(msg: Any) -> int:
    return int(msg.value()[:6])


def visible(cluster: KafkaCluster, topic: str, end: int, timeout: float = 20) -> tuple[int, int]:
    """The watermarks once the high watermark reached ``end``."""
    probe = rd_group_consumer(cluster.bootstrap, "probe", topic)
    try:
        deadline = time.monotonic() + timeout
        while True:
            low, high = probe.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
            if high >= end or time.monotonic() > deadline:
                return low, high
            time.sleep(0.05)
    finally:
        probe.close()


def test_offsets_count_messages_and_kcat_reads_the_last_100(
    module_kafka_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    cluster = module_kafka_cluster
    topic = unique_name("counted")
    cluster.create_topic(topic, 1)
    produce_batches(cluster.bootstrap, topic, 0, N)
    assert visible(cluster, topic, N) == (0, N)  # ListOffsets earliest, latest

    got = rd_consume(cluster.bootstrap, topic, 1, N)
    assert [value_of(m) for m in got] == list(range(N))
    assert [m.offset() for m in got] == list(range(N))  # contiguous across batches

    out = kcat("-b", cluster.bootstrap, "-C", "-t", topic, "-p", "0", "-o", "-100", "-e", "-J", "-q")
    last = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert [m["offset"] for m in last] == list(range(N - 100, N))
    assert [int(m["payload"][:6]) for m in last] == list(range(N - 100, N))

    # a produce answer is the batch's first message offset: librdkafka's delivery reports
    producer = RdProducer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 100})
    reported: list[int] = []
    for i in range(5):
        producer.produce(
            topic, value=b"%06d" % (N + i), partition=0, on_delivery=lambda e, m: reported.append(m.offset())
        )
    assert producer.flush(30) == 0
    assert sorted(reported) == list(range(N, N + 5))


def batch_of(segment: Path, record: int) -> tuple[int, int]:
    """(byte offset of the batch holding value ``record``, its index there), read from
    the segment file (a topic whose values are 0, 1, 2, ... in order)."""
    batches, _ = records.decode_batches(segment.read_bytes(), 0)
    for batch in batches:
        values = [int(bytes(v)[:6]) for v in batch.values]
        if record in values:
            return batch.offset, values.index(record)
    raise AssertionError(f"record {record} not in {segment}")


def test_commits_and_lag_are_in_messages_and_survive_a_restart(kafka_cluster: Any, zk_client: Any) -> None:
    cluster = kafka_cluster(1)
    cluster.create_topic("lagging", 1)
    produce_batches(cluster.bootstrap, "lagging", 0, N)
    consumer = rd_group_consumer(cluster.bootstrap, "lag", "lagging")
    try:  # 405 is inside a batch (the 120 messages from 366)
        assert consume(consumer, 405, commit_last=True) == list(range(405))
    finally:
        consumer.close()
    # stored as a message offset, and for native consumers of the group as the batch
    # holding record 405 and how many of its records come before it
    kafka = json.loads(zk_client.get("/consumers/lag/kafka_offsets/lagging/0")[0])
    assert (kafka["offset"], kafka["unit"]) == (405, "message")
    native = json.loads(zk_client.get("/consumers/lag/offsets/lagging/0")[0])
    (segment,) = sorted((cluster.brokers[0].log_dir / "lagging-0").glob("*.log"))
    assert (native["offset"], native["skip"]) == batch_of(segment, 405)
    assert native["skip"] == 405 - 366

    broker = cluster.brokers[0]
    before = broker.kafka_address()
    broker.restart()
    deadline = time.monotonic() + 30  # port 0: the restarted broker logs its new port
    while broker.kafka_address() == before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert visible(cluster, "lagging", N) == (0, N)

    # what Kafka tools show (kafka-consumer-groups --describe asks the same): the
    # committed offset, the end, and the lag between them, in messages
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        committed = admin.list_group_offsets({"lag": None})["lag"]
        tp = KpTopicPartition("lagging", 0)
        end = admin.list_partition_offsets({tp: OffsetSpec.LATEST})[tp].offset
    finally:
        admin.close()
    assert committed[tp].offset == 405 and end == N
    assert end - committed[tp].offset == N - 405  # the lag: the records left to read
    consumer = rd_group_consumer(cluster.bootstrap, "lag", "lagging")
    try:
        assert consume(consumer, N - 405) == list(range(405, N))
    finally:
        consumer.close()


def test_after_retention_the_earliest_offset_is_the_first_kept_message(kafka_cluster: Any) -> None:
    cluster = kafka_cluster(1, retention_check_ms=200)
    with Admin(brokers=cluster.native) as admin:
        admin.create_topic("aged", 1, 1, config={"segment_bytes": 4096})
    produce_batches(cluster.bootstrap, "aged", 0, N)
    with Admin(brokers=cluster.native) as admin:
        admin.alter_topic("aged", {"retention_bytes": 20_000})
    deadline = time.monotonic() + 30
    low = high = 0
    while low == 0 and time.monotonic() < deadline:
        low, high = visible(cluster, "aged", N)
        time.sleep(0.2)
    assert 0 < low < N and high == N
    got = rd_consume(cluster.bootstrap, "aged", 1, N - low)  # from the earliest
    assert [m.offset() for m in got] == list(range(low, N))
    assert [value_of(m) for m in got] == list(range(low, N))  # offset i is record i


def test_a_log_and_a_commit_from_before_message_offsets(kafka_cluster: Any, zk_client: Any) -> None:
    cluster = kafka_cluster(1)
    cluster.create_topic("legacy", 1)
    produce_batches(cluster.bootstrap, "legacy", 0, N)
    broker = cluster.brokers[0]
    broker.stop()
    log_dir = broker.log_dir / "legacy-0"
    for index in log_dir.glob("*.index"):  # as a release before message offsets left it
        index.unlink()
    (segment,) = sorted(log_dir.glob("*.log"))
    # a Kafka commit of that release: the byte offset b + i of record 456 (i-th of the
    # batch at b)
    at, index = batch_of(segment, 456)
    old = at + index
    path = "/consumers/old/kafka_offsets/legacy/0"
    zk_client.create(path, json.dumps({"offset": old, "time": int(time.time() * 1000)}).encode(), makepath=True)
    # and a native consumer's commit: (batch byte offset, records of it consumed)
    at, skip = batch_of(segment, 789)
    value = {"offset": at, "skip": skip, "time": int(time.time() * 1000)}
    zk_client.create("/consumers/native/offsets/legacy/0", json.dumps(value).encode(), makepath=True)

    before = broker.kafka_address()
    broker.start()
    deadline = time.monotonic() + 30
    while broker.kafka_address() == before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sorted(p.name for p in log_dir.glob("*.index")) == [segment.with_suffix(".index").name]  # rebuilt
    assert visible(cluster, "legacy", N) == (0, N)
    got = rd_consume(cluster.bootstrap, "legacy", 1, N)
    assert [m.offset() for m in got] == list(range(N))
    assert [value_of(m) for m in got] == list(range(N))
    consumer = rd_group_consumer(cluster.bootstrap, "old", "legacy")
    try:  # the old commit, read as a message offset: the group resumes at record 456
        assert consume(consumer, N - 456) == list(range(456, N))
    finally:
        consumer.close()
    consumer = rd_group_consumer(cluster.bootstrap, "native", "legacy")
    try:  # the native commit, read as a message offset: the group resumes at record 789
        assert consume(consumer, N - 789) == list(range(789, N))
    finally:
        consumer.close()
