"""The idempotent producer against real brokers and a real ZooKeeper: an acknowledgement
lost after the append (a proxy swallows it and cuts the connection) makes the producer
retry, and the log still holds one copy, across a leader change (kill -9 of the leader
that appended) and across a restart of the broker (its producer state rebuilt from the
log). A producer with idempotence off, in the same setting, duplicates: the test bites.
"""

from __future__ import annotations

from collections import Counter

import pytest

from broker.client import Admin, Producer, SimpleConsumer
from broker.common.errors import UnknownTopicOrPartitionError
from broker.testing.localrun import free_port
from tests.support.ack_drop import AckDropProxy
from tests.support.metrics import samples, scrape
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


def copies(brokers: list[str], topic: str, expected: int, partition: int = 0) -> Counter[bytes]:
    """How many times each value is in the partition (read from the brokers directly),
    once at least ``expected`` messages are visible (acknowledged is not yet visible:
    consumers see a partition up to its flushed end)."""
    held: Counter[bytes] = Counter()

    def visible() -> bool:
        nonlocal held
        with SimpleConsumer(brokers=brokers, request_timeout=10) as consumer:
            held = Counter(m.value for m in consumer.messages(topic, partition))
        return sum(held.values()) >= expected

    wait_until(visible, 30, f"{expected} messages visible in {topic}")
    return held


def add_brokers(cluster, n: int, log: dict | None = None, **settings) -> None:
    """Start ``n`` brokers, each with its own metrics port."""
    for _ in range(n):
        port = free_port()
        cluster.add({**settings, "metrics_port": port}, log).metrics_port = port


def duplicates(broker) -> float:
    """Batches ``broker`` recognised as already held since it started."""
    text = scrape(f"http://127.0.0.1:{broker.metrics_port}/metrics")
    return sum(v for (name, _), v in samples(text).items() if name == "logferry_produce_duplicates_total")


def send_through_a_lost_ack(
    proxy: AckDropProxy, producer: Producer, topic: str, tag: bytes, n: int = 50
) -> list[bytes]:
    """Send ``n`` values (several batches in one request) with the answer dropped once."""
    values = [tag + b"-%03d" % i for i in range(n)]
    proxy.drop_next()
    futures = [producer.send(topic, [v], partition=0) for v in values]
    producer.flush(60)
    for future in futures:
        future.wait(0)
    assert proxy.dropped_event.is_set(), "the proxy dropped no answer: nothing was retried"
    return values


def test_a_retry_after_a_lost_ack_leaves_one_copy(broker_cluster):
    cluster = broker_cluster(1)
    with Admin(brokers=cluster.bootstrap) as admin:
        admin.create_topic("idem", 1)
        admin.create_topic("plain", 1)
    with AckDropProxy(cluster.bootstrap) as proxy:
        with Producer(
            brokers=proxy.addresses, acks="all", linger_ms=20, batch_messages=10, retry_backoff_ms=20
        ) as producer:
            assert producer.idempotence  # the default with acks=all
            values = send_through_a_lost_ack(proxy, producer, "idem", b"i")
        # the control: the same lost ack without idempotence appends the batches twice
        with Producer(
            brokers=proxy.addresses, acks="all", linger_ms=20, batch_messages=10, retry_backoff_ms=20, idempotence=False
        ) as plain:
            plain_values = send_through_a_lost_ack(proxy, plain, "plain", b"p")
    held = copies(cluster.bootstrap, "idem", len(values))
    assert sorted(held) == values and set(held.values()) == {1}
    assert set(copies(cluster.bootstrap, "plain", 100).values()) == {2}, "the proxy did not bite"
    assert len(plain_values) == 50


def test_a_retry_after_a_leader_change_leaves_one_copy(broker_cluster):
    cluster = broker_cluster(0)
    add_brokers(cluster, 2, zk_session_timeout_s=3.0, replica_lag_time_max_ms=1500, leader_rebalance_interval_s=0)
    topic = "idem-rf2"
    with Admin(brokers=cluster.bootstrap) as admin:
        admin.create_topic(topic, 1, replication_factor=2, min_insync_replicas=1)
        wait_until(
            lambda: len(admin.describe_partitions(topic)[0].isr) == 2,
            30,
            "both in sync",
            ignore=(UnknownTopicOrPartitionError,),
        )  # until the metadata reaches it
        leader_id = admin.describe_partitions(topic)[0].leader
    leader = next(b for b in cluster.brokers if b.id == leader_id)
    survivor = next(b for b in cluster.brokers if b.id != leader_id)
    with (
        AckDropProxy(cluster.bootstrap) as proxy,
        Producer(
            brokers=proxy.addresses,
            acks="all",
            linger_ms=20,
            batch_messages=10,
            retry_backoff_ms=50,
            delivery_timeout=90,
        ) as producer,
    ):
        first = [b"a-%03d" % i for i in range(20)]
        for v in first:
            producer.send(topic, [v], partition=0)
        producer.flush(30)
        # acks=all: the follower holds the batches when their answer is dropped;
        # every answer is dropped until the leader is gone, so the retry that
        # succeeds is the one the new leader answers
        proxy.drop_all()
        lost = [b"b-%03d" % i for i in range(30)]
        futures = [producer.send(topic, [v], partition=0) for v in lost]
        assert proxy.dropped_event.wait(30), "the leader never answered"
        leader.kill()  # kill -9 of the leader that appended
        proxy.stop_dropping()
        for future in futures:
            future.wait(90)  # retried on the new leader, which holds them already
        after = [b"c-%03d" % i for i in range(20)]
        for v in after:
            producer.send(topic, [v], partition=0)
        producer.flush(60)
    held = copies([survivor.address], topic, len(first + lost + after))
    assert sorted(held) == sorted(first + lost + after)
    assert set(held.values()) == {1}, {v: n for v, n in held.items() if n > 1}
    assert duplicates(survivor) >= 1, "the new leader deduplicated nothing: no retry reached it"


@pytest.mark.parametrize("how", ["kill -9", "stop"])
def test_a_retry_after_a_broker_restart_leaves_one_copy(broker_cluster, how):
    cluster = broker_cluster(0)
    add_brokers(cluster, 1, log={"segment_bytes": 4096})  # rolls: snapshots, then a walk
    broker = cluster.brokers[0]
    topic = "idem-restart"
    with Admin(brokers=cluster.bootstrap) as admin:
        admin.create_topic(topic, 1)
    with (
        AckDropProxy(cluster.bootstrap) as proxy,
        Producer(
            brokers=proxy.addresses,
            acks="all",
            linger_ms=20,
            batch_messages=10,
            retry_backoff_ms=100,
            delivery_timeout=90,
        ) as producer,
    ):
        first = [b"a-%03d" % i for i in range(200)]  # a few segments: snapshots on roll
        for v in first:
            producer.send(topic, [v], partition=0)
        producer.flush(30)
        proxy.drop_all()  # until the restart: the retry that counts meets rebuilt state
        lost = [b"b-%03d" % i for i in range(30)]
        futures = [producer.send(topic, [v], partition=0) for v in lost]
        assert proxy.dropped_event.wait(30), "the broker never answered"
        with SimpleConsumer(brokers=cluster.bootstrap) as consumer:  # durable first
            wait_until(lambda: len(list(consumer.messages(topic, 0))) == 230, 30, "flushed")
        if how == "stop":
            broker.stop()
        else:
            broker.kill()
        broker.start()
        proxy.stop_dropping()
        for future in futures:
            future.wait(90)  # retried on the restarted broker, which rebuilt its state
        producer.send(topic, [b"c-000"], partition=0)
        producer.flush(60)
    held = copies(cluster.bootstrap, topic, len(first + lost) + 1)
    assert sorted(held) == sorted(first + lost + [b"c-000"])
    assert set(held.values()) == {1}, {v: n for v, n in held.items() if n > 1}
    assert duplicates(broker) >= 1, "the restarted broker deduplicated nothing"
    if how == "stop":
        assert list(broker.log_dir.glob(f"{topic}-0/*.producers")), "no snapshot at the stop"
