"""A Kafka client's committed position across a leader change and retention, with
librdkafka (confluent-kafka) against real brokers and a real ZooKeeper (docs/kafka.md,
"Offsets").

A record's Kafka offset is its message offset, derived from the batch counts of bytes
that never move and the same on every replica (docs/storage.md), so a committed
position names the same record on every replica and after older segments are deleted;
a position below the log start gets OFFSET_OUT_OF_RANGE and the client's
``auto.offset.reset``.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from confluent_kafka import Consumer as RdConsumer
from confluent_kafka import KafkaError, TopicPartition
from confluent_kafka import Producer as RdProducer

from broker.client import Admin
from broker.server.kafka.groups import coordinator_for
from tests.integration.test_kafka_clients import rd_group_consumer

pytestmark = pytest.mark.integration


def produce(bootstrap: str, topic: str, values: range, per_request: int = 0) -> None:
    """Produce ``values`` to partition 0 with acks=all; every one acknowledged.
    ``per_request``: flush after that many, so each lands in its own batch."""
    producer = RdProducer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": 60000,
            "retry.backoff.ms": 200,
        }
    )
    failed: list[Any] = []
    for i in values:
        producer.produce(
            topic,
            value=b"%06d-" % i + b"x" * 180,
            partition=0,
            on_delivery=lambda err, _msg: err and failed.append(err),
        )
        if per_request and (i + 1) % per_request == 0:
            assert producer.flush(60) == 0
    assert producer.flush(60) == 0 and not failed, failed


def value_of(msg: Any) -> int:
    return int(msg.value()[:6])


def consume(consumer: Any, count: int, timeout: float = 60, commit_last: bool = False) -> list[int]:
    """Up to ``count`` values (errors fail the test); with ``commit_last`` the last
    message's position is committed synchronously (a mid-batch position)."""
    got: list[int] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.3)
        if msg is None:
            continue
        if msg.error() is not None:
            if msg.error().retriable() or msg.error().code() in (
                KafkaError._TRANSPORT,
                KafkaError._ALL_BROKERS_DOWN,
                KafkaError.NOT_COORDINATOR,
                KafkaError.COORDINATOR_NOT_AVAILABLE,
            ):
                continue  # a broker just went away: the client recovers by itself
            raise AssertionError(msg.error())
        got.append(value_of(msg))
        if commit_last and len(got) == count:
            consumer.commit(message=msg, asynchronous=False)
    return got


def leader_of(native: list[str], topic: str, timeout: float = 30) -> int:
    """Partition 0's leader, once the brokers asked know the topic (-1: none now)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with Admin(brokers=native) as admin:
                return admin.describe_topic(topic)[0]
        except Exception:  # a broker that has not seen the topic yet, or is going away
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.mark.parametrize("how", ["kill -9", "controlled shutdown"])
def test_committed_position_survives_a_leader_change(kafka_cluster: Any, how: str) -> None:
    cluster = kafka_cluster(3, default_replication_factor=3, min_insync_replicas=2)
    cluster.create_topic("moving", 1, rf=3)
    leader = leader_of(cluster.native, "moving")
    # a group whose coordinator is that broker too: both the partition's leader and
    # the group's coordinator change under the client
    group = next(f"g{i}" for i in range(1000) if coordinator_for(f"g{i}", [1, 2, 3]) == leader)
    produce(cluster.bootstrap, "moving", range(300))
    consumer = rd_group_consumer(cluster.bootstrap, group, "moving")
    try:
        assert consume(consumer, 120, commit_last=True) == list(range(120))
    finally:
        consumer.close()

    gone = next(b for b in cluster.brokers if b.id == leader)
    if how == "kill -9":
        gone.kill()
    else:
        gone.stop()  # SIGTERM: the controller moves its leaderships first
    survivors = [b for b in cluster.brokers if b.id != leader]
    native = [b.address for b in survivors]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and leader_of(native, "moving") in (leader, -1):
        time.sleep(0.3)
    new_leader = leader_of(native, "moving")
    assert new_leader not in (leader, -1)
    bootstrap = ",".join(b.kafka_address() for b in survivors)
    produce(bootstrap, "moving", range(300, 400))  # the new leader appends after them

    consumer = rd_group_consumer(bootstrap, group, "moving")
    try:
        rest = consume(consumer, 280)
    finally:
        consumer.close()
    # exactly from the committed position: nothing skipped, nothing read twice
    assert rest == list(range(120, 400)), (rest[:5], len(rest))


def test_committed_position_survives_retention_and_below_the_log_start_resets(kafka_cluster: Any) -> None:
    cluster = kafka_cluster(1, retention_check_ms=200)
    with Admin(brokers=cluster.native) as admin:
        admin.create_topic("aging", 1, 1, config={"segment_bytes": 1024})
    produce(cluster.bootstrap, "aging", range(300), per_request=10)  # ~2 KiB batches
    segments = [p for p in cluster.brokers[0].segment_files() if p.parent.name == "aging-0"]
    assert len(segments) >= 25, "a batch per segment"
    # one group commits late in the log, another early
    for group, count in (("late", 250), ("early", 50), ("early-latest", 50), ("early-error", 50)):
        consumer = rd_group_consumer(cluster.bootstrap, group, "aging")
        try:
            assert consume(consumer, count, commit_last=True) == list(range(count))
        finally:
            consumer.close()

    with Admin(brokers=cluster.native) as admin:  # keep about the last 10 batches
        admin.alter_topic("aging", {"retention_bytes": 10 * 2300})
    probe = RdConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": "probe"})
    try:
        deadline = time.monotonic() + 30
        low = 0
        while time.monotonic() < deadline:
            low, high = probe.get_watermark_offsets(TopicPartition("aging", 0), timeout=10)
            if low > 0:
                break
            time.sleep(0.3)
        probe.assign([TopicPartition("aging", 0, low)])
        first_kept = consume(probe, 1)[0]
    finally:
        probe.close()
    assert low > 0, "retention deleted the oldest segments"
    assert 50 < first_kept <= 250, first_kept  # below "late", above "early"
    assert low == first_kept  # the log start is the first kept record's message offset

    # segments below the committed position are gone: the group resumes exactly there
    consumer = rd_group_consumer(cluster.bootstrap, "late", "aging")
    try:
        assert consume(consumer, 50) == list(range(250, 300))
    finally:
        consumer.close()

    # a committed position below the new log start: OFFSET_OUT_OF_RANGE, then the
    # client's auto.offset.reset decides
    consumer = rd_group_consumer(cluster.bootstrap, "early", "aging")  # earliest
    try:
        assert consume(consumer, 300 - first_kept) == list(range(first_kept, 300))
    finally:
        consumer.close()

    fetching_at: list[int] = []  # where librdkafka fetches next (its statistics)

    def stats(text: str) -> None:
        part = json.loads(text).get("topics", {}).get("aging", {}).get("partitions", {})
        if part.get("0", {}).get("fetch_state") == "active":
            fetching_at.append(part["0"]["next_offset"])

    consumer = rd_group_consumer(
        cluster.bootstrap,
        "early-latest",
        "aging",
        **{"auto.offset.reset": "latest", "stats_cb": stats, "statistics.interval.ms": 200},
    )
    try:
        deadline = time.monotonic() + 30  # until the reset put it at the end
        while time.monotonic() < deadline and high not in fetching_at:
            assert consume(consumer, 1, timeout=0.5) == []  # nothing old is served
        assert high in fetching_at and high == 300, fetching_at[-5:]
        produce(cluster.bootstrap, "aging", range(300, 305))
        assert consume(consumer, 5) == list(range(300, 305))
    finally:
        consumer.close()

    consumer = rd_group_consumer(cluster.bootstrap, "early-error", "aging", **{"auto.offset.reset": "error"})
    try:
        deadline = time.monotonic() + 30
        error = None
        while error is None and time.monotonic() < deadline:
            msg = consumer.poll(0.3)
            if msg is not None:
                assert msg.error() is not None, "no record below the log start is served"
                error = msg.error()
        assert error is not None and error.code() == KafkaError._AUTO_OFFSET_RESET, error
        assert "out of range" in error.str().lower() or "offset" in error.str().lower()
    finally:
        consumer.close()
