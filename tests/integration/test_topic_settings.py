"""Per-topic settings and online partition growth, with real brokers and a real ZooKeeper.

Settings are set at creation, changed later and applied without a restart (retention
deletes segments once lowered); bad keys and values are refused naming the key; a
topic grows while a producer and a consumer group run, and every message arrives.
"""

from __future__ import annotations

import threading
import time

import pytest

from broker.client import Admin, GroupConsumer, Producer
from broker.common.errors import InvalidTopicConfigError
from broker.wire import protocol
from tests.support.cli import logferry
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


_cli = logferry


def test_settings_at_creation_and_retention_lowered_without_a_restart(broker_cluster):
    cluster = broker_cluster(1, broker={"retention_check_ms": 200})
    zk = cluster.zk_connect
    created = _cli(
        "topic",
        "create",
        "small-segs",
        "-p",
        "1",
        "--config",
        "segment_bytes=1024",
        "--config",
        "compression=zstd",
        zk=zk,
    )
    assert created.returncode == 0, created.stderr
    again = _cli("topic", "create", "small-segs", "-p", "1", "--if-not-exists", zk=zk)
    assert again.returncode == 0 and "nothing changed" in again.stdout, again.stderr
    exists = _cli("topic", "create", "small-segs", "-p", "1", zk=zk)
    assert exists.returncode != 0 and "already exists" in exists.stderr
    described = _cli("topic", "describe", "small-segs", zk=zk)
    assert "compression=zstd segment_bytes=1024" in described.stdout, described.stdout
    broker = cluster.brokers[0]
    with Producer(zk=zk, acks="all", linger_ms=0, batch_messages=1) as producer:
        for i in range(300):  # one request each: a segment rolls between appends only
            producer.send("small-segs", b"%04d-" % i + b"x" * 200, partition=0).wait(10)
    segments = [p for p in broker.segment_files() if p.parent.name == "small-segs-0"]
    assert len(segments) >= 10, "segment_bytes=1024 rolls small segments"
    # the broker compressed the producer's plain batches (compression=zstd)
    assert sum(p.stat().st_size for p in segments) < 300 * 200

    altered = _cli("topic", "alter", "small-segs", "--config", "retention_bytes=2048", zk=zk)
    assert altered.returncode == 0 and "retention_bytes=2048" in altered.stdout, altered.stderr

    def trimmed() -> bool:
        left = [p for p in broker.segment_files() if p.parent.name == "small-segs-0"]
        return 0 < len(left) <= 4

    wait_until(trimmed, 15, "retention_bytes applied without a restart")
    assert broker.is_running() and broker.log_text().count("listening on") == 1

    removed = _cli("topic", "alter", "small-segs", "--delete-config", "compression", zk=zk)
    assert removed.returncode == 0 and "compression" not in removed.stdout.split("settings:")[1]
    with Admin(zk=zk) as admin:
        assert admin.topic_config("small-segs") == {"segment_bytes": 1024, "retention_bytes": 2048}


def test_bad_settings_are_refused_naming_the_key_and_change_nothing(broker_cluster):
    cluster = broker_cluster(1)
    zk = cluster.zk_connect
    for args, key in (
        (["--config", "retention_ms=soon"], "retention_ms"),
        (["--config", "retention_hourz=3"], "retention_hourz"),
        (["--config", "compression=snappy"], "compression"),
        (["--config", "min_insync_replicas=2"], "min_insync_replicas"),
    ):
        out = _cli("topic", "create", "refused", "-p", "1", *args, zk=zk)
        assert out.returncode == 2 and key in out.stderr, (args, out.stderr)
    with Admin(zk=zk) as admin:
        assert "refused" not in admin.list_topics()
        admin.create_topic("kept", 1, config={"retention_ms": 60_000})
        # the broker checks too: a request that skips the client's check is refused
        with pytest.raises(InvalidTopicConfigError, match="segment_bytes"):
            admin.cluster.call_any(protocol.ALTER_TOPIC, {"topic": "kept", "set": {"segment_bytes": 5}})
        with pytest.raises(InvalidTopicConfigError, match="bogus"):
            admin.alter_topic("kept", delete=["bogus"])
        assert admin.topic_config("kept") == {"retention_ms": 60_000}
    bad = _cli("topic", "alter", "kept", "--delete-config", "nope", zk=zk)
    assert bad.returncode == 2 and "nope" in bad.stderr


def test_partitions_grow_under_a_producer_and_a_group_and_never_shrink(broker_cluster):
    cluster = broker_cluster(2, broker={"default_replication_factor": 2})
    zk = cluster.zk_connect
    topic = "growing"
    with Admin(zk=zk) as admin:
        admin.create_topic(topic, 2, replication_factor=2)
    acked: set[bytes] = set()
    failed: list[BaseException] = []
    stop = threading.Event()
    producer = Producer(zk=zk, acks="all", linger_ms=2, metadata_max_age_s=1.0)

    def produce() -> None:
        i = 0
        while not stop.is_set():
            values = [b"%08d" % (i + j) for j in range(5)]
            i += 5
            future = producer.send(topic, values)

            def done(f, values=values) -> None:
                if f.exception() is None:
                    acked.update(values)
                else:
                    failed.append(f.exception())

            future.add_callback(done)
            time.sleep(0.005)

    received: dict[int, set[bytes]] = {}
    consumer = GroupConsumer("growth-dashboard", [topic], zk=zk, start="earliest")

    def consume() -> None:
        while not stop.is_set():
            for message in consumer.poll(timeout=0.3):
                received.setdefault(message.partition, set()).add(message.value)

    threads = [threading.Thread(target=produce, daemon=True), threading.Thread(target=consume, daemon=True)]
    for t in threads:
        t.start()
    try:
        wait_until(lambda: len(acked) > 500, 30, "messages before growing")
        grown = _cli("topic", "alter", topic, "--partitions", "4", zk=zk)
        assert grown.returncode == 0 and "now has 4 partitions" in grown.stdout, grown.stderr
        with Admin(zk=zk) as admin:
            parts = admin.describe_partitions(topic)
        assert sorted(parts) == [0, 1, 2, 3]
        assert all(len(set(parts[p].replicas)) == 2 for p in (2, 3))
        wait_until(lambda: {2, 3} <= set(received), 30, "the group consuming the new partitions")
        shrink = _cli("topic", "alter", topic, "--partitions", "3", zk=zk)
        assert shrink.returncode == 2 and "cannot be removed" in shrink.stderr, shrink.stderr
        time.sleep(1)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        producer.flush(60)
        producer.close()
    assert not failed, failed[:3]

    def all_arrived() -> bool:
        for message in consumer.poll(timeout=0.3):
            received.setdefault(message.partition, set()).add(message.value)
        return acked <= set().union(*received.values())

    try:
        wait_until(all_arrived, 30, "every acknowledged message consumed")
    finally:
        consumer.close()
    with Admin(zk=zk) as admin:
        assert len(admin.describe_partitions(topic)) == 4
