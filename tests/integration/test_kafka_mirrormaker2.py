"""MirrorMaker 2 (Apache Kafka's ``org.apache.kafka.connect.mirror.MirrorMaker``, dedicated
mode, one JVM) from one logferry cluster to another through their Kafka listeners
(docs/kafka.md, "MirrorMaker 2"), in its exactly-once mode: N records produced to the
source, exactly N read ``read_committed`` from the target's ``src.<topic>``, in order per
partition, none twice. The exactly-once mode needs of logferry everything the default,
at-least-once mode does (the same Connect worker, groups, state topics, idempotent
producers) and transactions besides: each poll's records and source positions are one
transaction on the target, the task's producer fenced by epoch at its start.

MM2 keeps its state in compacted topics on the clusters (Connect's configs, offsets and
status, ``mm2-offset-syncs``, heartbeats, checkpoints) and refuses topics whose
``cleanup.policy`` is not ``compact``: logferry takes ``cleanup.policy=compact`` as
"never deleted by retention" (docs/kafka.md, "Configs")."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer as RdConsumer
from confluent_kafka import Producer as RdProducer
from confluent_kafka import TopicPartition

from benchmarks.peers import mirrormaker2
from broker.testing import kafka_jars
from broker.testing.jvm import QUICK_JVM_OPTIONS
from broker.testing.localrun import free_port
from tests.support.brokers import KAFKA_LISTENER, KafkaCluster
from tests.support.kafka_java import unavailable_reason

pytestmark = pytest.mark.integration

N = 600
PARTITIONS = 2
TOPIC = "orders"


def produce(cluster: KafkaCluster) -> dict[int, list[bytes]]:
    """N keyed records over the partitions; what each partition got, in order."""
    producer = RdProducer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
    sent: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    for i in range(N):
        value = b"v%05d" % i
        producer.produce(TOPIC, key=b"k%d" % i, value=value, partition=i % PARTITIONS)
        sent[i % PARTITIONS].append(value)
    assert producer.flush(30) == 0
    return sent


def read_mirrored(
    cluster: KafkaCluster, topic: str, count: int, timeout: float, mm2: subprocess.Popen[bytes]
) -> dict[int, list[bytes]]:
    """What the target's ``topic`` holds per partition, read until ``count`` records
    arrived (MM2 creates the topic: it is waited for) and one more idle second showed
    no more (a duplicate would come after the N). Fails at once if MM2 exits."""
    consumer = RdConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": "check", "enable.auto.commit": False})
    got: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    try:
        deadline = time.monotonic() + timeout
        while topic not in consumer.list_topics(timeout=10).topics:
            assert time.monotonic() < deadline, f"MirrorMaker 2 did not create {topic} on the target"
            assert mm2.poll() is None, f"MirrorMaker 2 exited ({mm2.returncode})"
            time.sleep(0.5)
        consumer.assign([TopicPartition(topic, p, -2) for p in range(PARTITIONS)])
        quiet_until = None
        while time.monotonic() < deadline:
            assert mm2.poll() is None, f"MirrorMaker 2 exited ({mm2.returncode})"
            msg = consumer.poll(0.5)
            total = sum(map(len, got.values()))
            if msg is None:
                if total >= count:
                    quiet_until = quiet_until or time.monotonic() + 1.0
                    if time.monotonic() > quiet_until:
                        break
                continue
            assert msg.error() is None, msg.error()
            got[msg.partition()].append(msg.value())
        return got
    finally:
        consumer.close()


@pytest.mark.slow
def test_mirrormaker2_exactly_once_copies_every_record_once_in_order(
    broker_cluster: Any, zookeeper: Any, tmp_path: Path
) -> None:
    reason = unavailable_reason() or (
        None if kafka_jars.resolved(kafka_jars.MIRRORMAKER2) else kafka_jars.missing_reason(kafka_jars.MIRRORMAKER2)
    )
    if reason is not None:
        pytest.skip(reason)
    source = KafkaCluster(broker_cluster(1, kafka=KAFKA_LISTENER))
    target = KafkaCluster(broker_cluster(1, kafka=KAFKA_LISTENER, zk=zookeeper.new_chroot()))
    source.create_topic(TOPIC, PARTITIONS)
    sent = produce(source)

    # benchmarks/peers/mirrormaker2.py: the properties and the JVM benchmarks/vs_kafka_mirror.py runs too
    config = mirrormaker2.properties(
        source.bootstrap, target.bootstrap, TOPIC, offset_flush_ms=None, exactly_once_rest_port=free_port()
    )
    mm2 = mirrormaker2.start(tmp_path, config, "dst", QUICK_JVM_OPTIONS)
    log = tmp_path / "mm2.log"
    try:
        mirrored = read_mirrored(target, f"src.{TOPIC}", N, 150, mm2)
    except BaseException:
        print(log.read_text()[-20000:])
        raise
    finally:
        # Killed, not stopped: a clean stop of its Connect worker takes seconds (its group
        # close times out on a pending coordinator request), and nothing is checked after.
        mm2.kill()
        mm2.wait()
    counts = {p: len(v) for p, v in mirrored.items()}
    if mirrored != sent:
        print(log.read_text()[-20000:])
    assert counts == {p: len(v) for p, v in sent.items()}  # sent N, read N (read_committed)
    assert mirrored == sent  # in order per partition, none twice
    # the copy really ran in transactions: its task's producer had a transactional id
    assert "transactional.id = src-mm2-MirrorSourceConnector-0" in log.read_text()
