"""Kafka's DeleteRecords (confluent-kafka's ``AdminClient.delete_records``) on a
replicated partition: the new log start holds on the follower, after a kill -9 of the
leader, after that broker's restart and when it leads again (docs/kafka.md, "Deleting records, groups and
offsets"). Counted: the N - K messages from K on, each once and in order."""

from __future__ import annotations

import json
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from broker.client import Admin
from broker.storage.log_start import FILE_NAME
from tests.integration.test_kafka_clients import rd_consume
from tests.integration.test_kafka_message_offsets import produce_batches, value_of, visible
from tests.replication.conftest import REPLICATED, broker_by_id, describe, full_isr, wait_until
from tests.support.brokers import KAFKA_LISTENER, BrokerProcess, KafkaCluster

pytestmark = pytest.mark.integration

N = 1000
K = 617
"""Records deleted: those before message offset K (inside a batch: SIZES make it so)."""
TOPIC = "trimmed"


def recorded_start(broker: BrokerProcess) -> dict[str, int] | None:
    """The log start the broker recorded for the partition on disk (None: none)."""
    path = broker.log_dir / f"{TOPIC}-0" / FILE_NAME
    return json.loads(path.read_text()) if path.exists() else None


def first_segment(broker: BrokerProcess) -> int:
    """The base byte offset of the partition's first segment file on the broker."""
    return min(int(p.stem) for p in (broker.log_dir / f"{TOPIC}-0").glob("*.log"))


def watermarks_and_records(
    cluster: KafkaCluster, start: int = K, end: int = N
) -> tuple[tuple[int, int], list[int], list[int]]:
    """(low, high) as librdkafka sees them once the high watermark is ``end``, then the
    offsets and the values of the ``end - start`` records read from the earliest offset
    (record i was produced as value i: offsets and values are equal when every replica
    counts messages alike)."""
    low_high = visible(cluster, TOPIC, end)
    got = rd_consume(cluster.bootstrap, TOPIC, 1, end - start, timeout=20)
    return low_high, [m.offset() for m in got], [value_of(m) for m in got]


def test_deleted_records_stay_deleted_on_every_replica_after_kill_restart_and_leader_changes(
    broker_cluster: Any,
) -> None:
    settings = {**REPLICATED, "default_replication_factor": 2, "min_insync_replicas": 1}
    cluster = KafkaCluster(broker_cluster(2, broker=settings, kafka=KAFKA_LISTENER))
    with Admin(brokers=cluster.native) as admin:
        admin.create_topic(TOPIC, 1, 2, config={"segment_bytes": 8192})
    produce_batches(cluster.bootstrap, TOPIC, 0, N)
    wait_until(full_isr(cluster.cluster, TOPIC), 30, "both replicas in sync")
    assert visible(cluster, TOPIC, N) == (0, N)  # past the high watermark DeleteRecords refuses

    admin_client = AdminClient({"bootstrap.servers": cluster.bootstrap})  # kept: its futures need it
    futures = admin_client.delete_records([TopicPartition(TOPIC, 0, K)])
    (deleted,) = [f.result(30) for f in futures.values()]
    assert deleted.low_watermark == K
    leader = broker_by_id(cluster.cluster, describe(cluster.cluster, TOPIC)[0].leader)
    follower = next(b for b in cluster.brokers if b is not leader)
    start = recorded_start(leader)
    assert start is not None and start["message"] == K
    wait_until(lambda: recorded_start(follower) == start, 20, "the follower takes the leader's start")
    for broker in cluster.brokers:  # the segments wholly below the start are gone on both
        assert 0 < first_segment(broker) <= start["offset"]
    expected = list(range(K, N))
    assert watermarks_and_records(cluster) == ((K, N), expected, expected)

    leader.kill()  # the follower leads; it hides the same records
    wait_until(lambda: describe(cluster.cluster, TOPIC, avoid=leader)[0].leader == follower.id, 30, "a new leader")
    assert watermarks_and_records(cluster) == ((K, N), expected, expected)

    leader.start()  # back from kill -9 with its recorded start, then leading again
    wait_until(full_isr(cluster.cluster, TOPIC), 40, "the old leader back in sync")
    assert recorded_start(leader) == start
    follower.stop()
    wait_until(lambda: describe(cluster.cluster, TOPIC, avoid=follower)[0].leader == leader.id, 30, "the old leader")
    assert watermarks_and_records(cluster) == ((K, N), expected, expected)

    # A replica whose log ends before the leader's new start restarts its log empty there,
    # counting from the first message of the leader's start batch, then hides the same
    # records: after it leads, offset i is still record i.
    more, k2 = 400, N + 151
    produce_batches(cluster.bootstrap, TOPIC, N, more)
    assert visible(cluster, TOPIC, N + more)[1] == N + more
    admin_client = AdminClient({"bootstrap.servers": cluster.bootstrap})  # the restarted broker's new port
    futures = admin_client.delete_records([TopicPartition(TOPIC, 0, k2)])
    assert [f.result(30).low_watermark for f in futures.values()] == [k2]
    second = recorded_start(leader)
    assert second is not None and second["message"] == k2
    follower.start()
    wait_until(lambda: recorded_start(follower) == second, 30, "the returning follower takes the leader's start")
    assert "restarting the log empty" in follower.log_text()  # its end was before the start
    wait_until(full_isr(cluster.cluster, TOPIC), 40, "the follower back in sync")
    leader.stop()
    wait_until(lambda: describe(cluster.cluster, TOPIC, avoid=leader)[0].leader == follower.id, 30, "the follower")
    expected = list(range(k2, N + more))
    assert watermarks_and_records(cluster, k2, N + more) == ((k2, N + more), expected, expected)


def listed(admin: AdminClient, spec: OffsetSpec) -> int:
    """ListOffsets of partition 0 through the admin client."""
    tp = TopicPartition(TOPIC, 0)
    return int(admin.list_offsets({tp: spec})[tp].result(30).offset)


def test_bad_delete_records_requests_get_kafkas_errors(kafka_cluster: Any) -> None:
    cluster = kafka_cluster(1)
    cluster.create_topic(TOPIC, 1)
    produce_batches(cluster.bootstrap, TOPIC, 0, 100)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    wait_until(lambda: listed(admin, OffsetSpec.latest()) == 100, 20, "the 100 records visible")
    past = admin.delete_records([TopicPartition(TOPIC, 0, 101)])
    with pytest.raises(Exception, match="OFFSET_OUT_OF_RANGE|out of range"):
        next(iter(past.values())).result(30)
    unknown = admin.delete_records([TopicPartition("no-such-topic", 0, 1)])
    with pytest.raises(Exception, match="UNKNOWN_TOPIC|No leaders found"):
        next(iter(unknown.values())).result(30)
    assert listed(admin, OffsetSpec.earliest()) == 0  # nothing deleted
    whole = admin.delete_records([TopicPartition(TOPIC, 0, -1)])  # -1: up to the high watermark
    assert next(iter(whole.values())).result(30).low_watermark == 100
    assert (listed(admin, OffsetSpec.earliest()), listed(admin, OffsetSpec.latest())) == (100, 100)
