"""GroupConsumer's API in one process: positions, seeks, start policies, streams, patterns."""

from __future__ import annotations

import datetime as dt
import threading
import time

import pytest
from kazoo.client import KazooClient

from broker.client import GroupConsumer, Producer, SimpleConsumer
from broker.client.group.consumer import PartitionNotOwnedError
from broker.client.group.offsets import Committed, read_offsets, write_offsets
from broker.common.errors import ConfigError
from tests.groups.conftest import create_topic, wait_for

pytestmark = pytest.mark.integration


def _send(zk: str, topic: str, batches: list[list[bytes]], partition: int = 0) -> None:
    """Each inner list becomes one batch (one send, flushed)."""
    with Producer(zk=zk, linger_ms=0) as producer:
        for values in batches:
            producer.send(topic, values, partition=partition).wait(30)


def _drain(consumer: GroupConsumer, expect: int, timeout: float = 20.0) -> list:
    got: list = []
    deadline = time.monotonic() + timeout
    while len(got) < expect and time.monotonic() < deadline:
        got.extend(consumer.poll(0.2))
    return got


def _ready(consumer: GroupConsumer, partitions: int) -> None:
    """Wait until the consumer owns ``partitions`` and knows where each starts."""

    def settled():
        m = consumer.metrics()
        return (
            len(consumer.assignment()) == partitions
            and m["state"] == "STABLE"
            and all(p["position"] is not None and p["committed"] is not None for p in m["partitions"].values())
        )

    wait_for(settled, 20, "the consumer to settle")


def test_position_moves_on_the_next_call_and_a_handover_mid_batch_repeats_nothing(module_cluster, unique_name):
    zk = module_cluster.zk_connect
    one, g = unique_name("one"), unique_name("g")
    create_topic(zk, one, 1)
    _send(zk, one, [[b"m%d" % i for i in range(10)]])  # one batch of ten
    first = GroupConsumer(g, [one], zk=zk, auto_commit_ms=0)
    taken = [next(first).value for _ in range(3)]
    assert taken == [b"m0", b"m1", b"m2"]
    first.close(processed=False)  # m2 was handed out but not processed: it comes again
    second = GroupConsumer(g, [one], zk=zk, auto_commit_ms=0)
    assert [next(second).value for _ in range(2)] == [b"m2", b"m3"]
    second.close()  # processed: the position is (batch offset, skip 4)
    [(_, committed)] = _offsets(zk, g).items()
    assert (committed.offset, committed.skip) == (0, 4)
    third = GroupConsumer(g, [one], zk=zk, iter_timeout=1.0)
    assert [m.value for m in third] == [b"m%d" % i for i in range(4, 10)]
    third.close()


def _offsets(zk: str, group: str) -> dict:
    client = KazooClient(hosts=zk)
    client.start(10)
    try:
        return read_offsets(client, group)
    finally:
        client.stop()
        client.close()


def test_seek_by_offset_and_by_time(module_cluster, unique_name):
    zk = module_cluster.zk_connect
    ts = unique_name("ts")
    create_topic(zk, ts, 2)
    for p in range(2):
        _send(zk, ts, [[b"old-%d-%d" % (p, i) for i in range(5)] for _ in range(3)], partition=p)
    time.sleep(0.05)
    boundary = dt.datetime.now(dt.UTC)
    time.sleep(0.05)
    for p in range(2):
        _send(zk, ts, [[b"new-%d-%d" % (p, i) for i in range(5)] for _ in range(2)], partition=p)
    consumer = GroupConsumer(unique_name("g"), [ts], zk=zk)
    assert len(_drain(consumer, 50)) == 50
    assert len(consumer.seek_all(boundary)) == 2
    again = _drain(consumer, 20)
    assert sorted(m.value for m in again) == sorted(
        b"new-%d-%d" % (p, i) for p in range(2) for i in range(5) for _ in range(2)
    )
    assert _drain(consumer, 1, 0.5) == []
    # By offset: the second batch of partition 1 (batches are whole, so take its offset).
    with SimpleConsumer(zk=zk) as simple:
        offsets = [b.offset for b in simple.fetch(ts, 1, 0).batches]
    assert consumer.seek(ts, 1, offsets[1]) == offsets[1]
    tail = _drain(consumer, 20)
    assert [m.value for m in tail][:5] == [b"old-1-%d" % i for i in range(5)]
    assert len(tail) == 20  # batches 2-5 of partition 1
    assert consumer.seek(ts, 0, "latest") >= 0 and _drain(consumer, 1, 1.0) == []
    with pytest.raises(PartitionNotOwnedError):
        consumer.seek(ts, 7, "earliest")
    consumer.close()


def test_new_group_at_latest_sees_only_new_messages(module_cluster, unique_name):
    zk = module_cluster.zk_connect
    late = unique_name("late")
    create_topic(zk, late, 3)
    for p in range(3):
        _send(zk, late, [[b"before"] * 10], partition=p)
    # acknowledged is not yet visible (the flush makes it so): "latest" is the visible end
    with SimpleConsumer(zk=zk) as simple:
        wait_for(
            lambda: all(simple.offsets(late, p).end > 0 for p in range(3)), 20, "the first messages to become visible"
        )
    with GroupConsumer(unique_name("fresh"), [late], zk=zk, start="latest") as consumer:
        _ready(consumer, 3)  # start positions resolved and pinned in ZooKeeper
        for p in range(3):
            _send(zk, late, [[b"after-%d" % p] * 5], partition=p)
        got = _drain(consumer, 15)
        assert sorted(m.value for m in got) == sorted([b"after-%d" % p for p in range(3)] * 5)
        assert _drain(consumer, 1, 0.5) == []
    # An old group at earliest still sees everything.
    with GroupConsumer(unique_name("old"), [late], zk=zk, iter_timeout=1.0) as old:
        assert len(list(old)) == 45


def test_paper_streams_share_partitions_and_each_thread_reads_its_own(module_cluster, unique_name):
    zk = module_cluster.zk_connect
    fan = unique_name("fan")
    create_topic(zk, fan, 4)
    with Producer(zk=zk) as producer:
        for i in range(4000):
            producer.send(fan, b"%d" % i, partition=i % 4)
    consumer = GroupConsumer(unique_name("g"), zk=zk, iter_timeout=1.5)
    streams = consumer.create_message_streams({fan: 2})[fan]
    assert len(streams) == 2
    seen: list[list] = [[], []]

    def read(i: int) -> None:
        for message in streams[i]:
            seen[i].append(message)

    threads = [threading.Thread(target=read, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert {m.partition for m in seen[0]} == {0, 1} and {m.partition for m in seen[1]} == {2, 3}
    assert sorted(int(m.value) for s in seen for m in s) == list(range(4000))
    with pytest.raises(ConfigError):
        next(iter(consumer))  # this consumer delivers through its streams
    consumer.close()


def test_pattern_subscription_picks_up_new_topics(module_cluster, unique_name):
    zk = module_cluster.zk_connect
    web, metrics, db = unique_name("logs.web"), unique_name("metrics"), unique_name("logs.db")
    create_topic(zk, web, 2)
    create_topic(zk, metrics, 2)
    _send(zk, web, [[b"web"] * 3])
    _send(zk, metrics, [[b"metric"] * 3])
    # this test's logs.* topics only: the broker is shared with the module's other tests
    consumer = GroupConsumer(unique_name("g"), pattern=unique_name(r"logs\..*"), zk=zk)
    assert [m.value for m in _drain(consumer, 3)] == [b"web"] * 3
    create_topic(zk, db, 2)
    _send(zk, db, [[b"db"] * 4], partition=1)
    got = _drain(consumer, 4)
    assert [(m.topic, m.value) for m in got] == [(db, b"db")] * 4
    assert (db, 1) in consumer.assignment() and (metrics, 0) not in consumer.assignment()
    consumer.close()


def test_batch_larger_than_max_bytes_is_fetched_anyway(module_cluster, unique_name):
    zk = module_cluster.zk_connect
    big = unique_name("big")
    create_topic(zk, big, 1)
    _send(zk, big, [[b"x" * 1000] * 50])  # one 50 kB batch
    with GroupConsumer(unique_name("g"), [big], zk=zk, max_bytes=1024) as consumer:
        assert len(_drain(consumer, 50)) == 50


def test_committed_offset_past_the_log_end_resets_to_the_end(module_cluster, unique_name, caplog):
    zk = module_cluster.zk_connect
    trunc, g = unique_name("trunc"), unique_name("g")
    create_topic(zk, trunc, 1)
    _send(zk, trunc, [[b"old"] * 5])
    client = KazooClient(hosts=zk)
    client.start(10)
    try:
        write_offsets(client, g, {(trunc, 0): Committed.now(10**9)})
    finally:
        client.stop()
        client.close()
    with GroupConsumer(g, [trunc], zk=zk) as consumer:
        wait_for(lambda: consumer.metrics()["offset_resets"] >= 1, 20, "the reset")
        _send(zk, trunc, [[b"new"] * 3])
        assert [m.value for m in _drain(consumer, 3)] == [b"new"] * 3
    assert "out of range" in caplog.text


def test_configuration_errors_say_what_to_do():
    with pytest.raises(ConfigError, match="ZooKeeper"):
        GroupConsumer("g", ["t"], brokers=["127.0.0.1:1"])
    with pytest.raises(ConfigError, match="group name"):
        GroupConsumer("bad/name", ["t"], zk="127.0.0.1:1/x")
    with pytest.raises(ConfigError, match="not both"):
        GroupConsumer("g", ["t"], pattern="t.*", zk="127.0.0.1:1/x")
    with pytest.raises(ConfigError, match="regular expression"):
        GroupConsumer("g", pattern="(", zk="127.0.0.1:1/x")
    with pytest.raises(ConfigError, match="start"):
        GroupConsumer("g", ["t"], zk="127.0.0.1:1/x", start="middle")


def test_duplicate_consumer_id_waits_for_the_first_to_leave(module_cluster, unique_name, caplog):
    zk = module_cluster.zk_connect
    dup, g = unique_name("dup"), unique_name("g")
    create_topic(zk, dup, 2)
    _send(zk, dup, [[b"x"] * 5])
    first = GroupConsumer(g, [dup], zk=zk, consumer_id="same")
    _ready(first, 2)
    second = GroupConsumer(g, [dup], zk=zk, consumer_id="same")
    wait_for(lambda: "registered by another session" in caplog.text, 10, "the warning")
    assert second.state == "REGISTERING" and second.assignment() == []
    first.close()
    _ready(second, 2)
    second.close()


def test_num_streams_share_partitions_through_streams(module_cluster, unique_name):
    zk = module_cluster.zk_connect
    two = unique_name("two")
    create_topic(zk, two, 4)
    with GroupConsumer(unique_name("g"), [two], zk=zk, num_streams=2, iter_timeout=1.0) as consumer:
        streams = consumer.streams()
        assert len(streams) == 2
        with pytest.raises(ConfigError, match="not both"):
            consumer.poll(0)
        wait_for(lambda: len(consumer.assignment()) == 4, 20, "the assignment")
        assert {p["stream"] for p in consumer.metrics()["partitions"].values()} == {0, 1}


def test_a_join_storm_converges_in_few_rebalances(module_cluster, unique_name):
    zk = module_cluster.zk_connect
    storm, g = unique_name("storm"), unique_name("g")
    create_topic(zk, storm, 12)
    members = []
    try:
        for i in range(5):  # five members join within a few milliseconds of each other
            members.append(GroupConsumer(g, [storm], zk=zk, consumer_id=f"m{i}"))

        def balanced():
            shares = [len(m.assignment()) for m in members]
            return sorted(shares) == [2, 2, 2, 3, 3] and all(m.state == "STABLE" for m in members)

        wait_for(balanced, 30, "a balanced group")
        rebalances = [m.metrics()["rebalances"] for m in members]
        assert max(rebalances) <= 4, rebalances  # debounced: not one per join per member
        owned = [tp for m in members for tp in m.assignment()]
        assert sorted(owned) == [(storm, p) for p in range(12)]
    finally:
        for m in members:
            m.close()


def test_deleted_topic_is_released_and_the_rest_keeps_flowing(module_cluster, unique_name):
    from broker.client import Admin

    zk = module_cluster.zk_connect
    keep, drop = unique_name("keep"), unique_name("drop")
    create_topic(zk, keep, 1)
    create_topic(zk, drop, 1)
    with GroupConsumer(unique_name("g"), [keep, drop], zk=zk) as consumer:
        wait_for(lambda: len(consumer.assignment()) == 2, 20, "both topics assigned")
        with Admin(zk=zk) as admin:
            admin.delete_topic(drop)
        wait_for(lambda: consumer.assignment() == [(keep, 0)], 20, "the deleted topic released")
        _send(zk, keep, [[b"still"] * 3])
        assert [m.value for m in _drain(consumer, 3)] == [b"still"] * 3
