"""The offset-preserving mirror (mode = "preserve") with real brokers and ZooKeeper.

Target partitions must equal their source partitions batch for batch (so byte for byte
and offset for offset), with no duplicate after kill -9 of the mirror or a stalled
target, and a target written by someone else must be reported, never spliced.
"""

from __future__ import annotations

import threading
import time

import pytest

from broker.client import Admin, GroupAdmin, GroupConsumer, Producer, SimpleConsumer
from tests.mirror.conftest import (
    assert_mirrored,
    create,
    ends,
    message_count,
    mirrored,
    produce,
    read_batches,
    wait_for,
)
from tests.support.cli import logferry

pytestmark = pytest.mark.integration

PRESERVE = {"mode": "preserve", "request_timeout_s": 2.0}


def assert_same_offsets(source_zk: str, target_zk: str, topic: str) -> None:
    """Each target partition starts and ends where its source partition does."""
    with SimpleConsumer(zk=source_zk) as s, SimpleConsumer(zk=target_zk) as t:
        for p in s.partitions(topic):
            assert tuple(t.offsets(topic, p))[:2] == tuple(s.offsets(topic, p))[:2], p


def test_kill_9_of_the_mirror_several_times_leaves_a_byte_identical_copy(two_clusters, mirrors):
    source, target = two_clusters()
    create(source.zk_connect, "events", 4)
    mirror = mirrors(
        "m1",
        source,
        target,
        topics=["events"],
        poll_max_bytes=256 * 1024,
        max_inflight_bytes=2 * 1024 * 1024,
        **PRESERVE,
    )

    def keep_producing() -> None:
        for round_ in range(20):
            produce(source.zk_connect, "events", 3_200, 4, tag=f"a{round_}")
            time.sleep(0.3)

    producer = threading.Thread(target=keep_producing)
    producer.start()
    kills = 0
    while producer.is_alive() or kills < 4:  # kill -9 mid-stream, again and again
        before = sum(ends(target.zk_connect, "events").values())
        wait_for(
            lambda before=before: sum(ends(target.zk_connect, "events").values()) > before or not producer.is_alive(),
            60,
            f"copying to go on before kill {kills}",
        )
        mirror.kill()
        kills += 1
        mirror.start()
        time.sleep(0.5 * (kills % 3))
    producer.join(120)
    wait_for(
        lambda: mirrored(source.zk_connect, target.zk_connect, "events", exact=True),
        90,
        "an exact copy after four kill -9",
    )
    assert mirror.terminate() == 0
    assert_mirrored(source.zk_connect, target.zk_connect, "events", exact=True)
    assert_same_offsets(source.zk_connect, target.zk_connect, "events")
    assert message_count(read_batches(target.zk_connect, "events")) == 64_000


@pytest.mark.parametrize(
    "stall_s",
    [
        8,
        # issue 20: "a mirror target stalled for 60 s gave 825 duplicates" (mode produce)
        pytest.param(60, marks=[pytest.mark.slow, pytest.mark.timeout(300)]),
    ],
)
def test_a_stalled_target_duplicates_nothing(two_clusters, mirrors, stall_s):
    source, target = two_clusters()
    create(source.zk_connect, "stalled", 2)
    mirror = mirrors("m1", source, target, topics=["stalled"], **PRESERVE)
    produce(source.zk_connect, "stalled", 10_000, 2, tag="a")
    wait_for(lambda: mirrored(source.zk_connect, target.zk_connect, "stalled", exact=True), 60, "the first copy")
    target.brokers[0].pause()  # SIGSTOP: connections stay up, nothing is answered
    try:
        produce(source.zk_connect, "stalled", 20_000, 2, tag="b")
        # appends time out (request_timeout_s = 2) while it is stopped; the resync query
        # retries (delivery_timeout_s) until the target answers again
        time.sleep(stall_s)
        assert mirror.alive()
    finally:
        target.brokers[0].resume()
    wait_for(
        lambda: mirrored(source.zk_connect, target.zk_connect, "stalled", exact=True),
        90,
        "an exact copy after the target stalled",
    )
    assert mirror.terminate() == 0
    assert_mirrored(source.zk_connect, target.zk_connect, "stalled", exact=True)
    assert message_count(read_batches(target.zk_connect, "stalled")) == 30_000


def test_a_target_written_by_someone_else_is_reported_and_never_spliced(two_clusters, mirrors):
    source, target = two_clusters()
    create(source.zk_connect, "split", 2)
    mirror = mirrors("m1", source, target, topics=["split"], **PRESERVE)
    produce(source.zk_connect, "split", 4_000, 2, tag="a")
    wait_for(lambda: mirrored(source.zk_connect, target.zk_connect, "split", exact=True), 60, "the first copy")
    assert mirror.terminate() == 0
    with Producer(zk=target.zk_connect) as foreign:  # someone writes to the target directly
        foreign.send("split", [b"not from the source"], partition=0).wait(30)
    foreign_end = ends(target.zk_connect, "split")[0]
    produce(source.zk_connect, "split", 4_000, 2, tag="b")
    mirror.start()
    wait_for(lambda: "split-0" in (mirror.status().get("halted") or {}), 60, "the divergence of split-0 in the status")
    assert "diverged" in mirror.status()["halted"]["split-0"]
    # partition 1 goes on; partition 0 keeps the foreign batch and gets nothing after it
    source_batches = read_batches(source.zk_connect, "split")
    wait_for(lambda: read_batches(target.zk_connect, "split")[1] == source_batches[1], 60, "split-1 copied on")
    time.sleep(1)
    assert ends(target.zk_connect, "split")[0] == foreign_end
    assert "MIRROR PARTITION DIVERGED: split-0" in mirror.log_file.read_text()
    assert mirror.terminate() == 0


def test_an_empty_target_starts_at_the_source_log_start(two_clusters, mirrors):
    source, target = two_clusters(
        source_broker={"retention_check_ms": 200}, source_log={"segment_bytes": 20_000, "retention_bytes": 40_000}
    )
    create(source.zk_connect, "old", 1)
    for round_ in range(8):  # one produce request per round, so segments roll
        produce(source.zk_connect, "old", 500, 1, batch=50, tag=str(round_))
    with SimpleConsumer(zk=source.zk_connect) as consumer:
        wait_for(lambda: consumer.offsets("old", 0).start > 0, 30, "retention on the source")
    mirror = mirrors("m1", source, target, topics=["old"], **PRESERVE)
    wait_for(
        lambda: mirrored(source.zk_connect, target.zk_connect, "old", exact=True),
        60,
        "a copy from the source's log start",
    )
    assert_same_offsets(source.zk_connect, target.zk_connect, "old")
    assert mirror.terminate() == 0


def test_copied_group_offsets_let_a_consumer_resume_on_the_target(two_clusters, mirrors, tmp_path):
    source, target = two_clusters()
    create(source.zk_connect, "clicks", 2)
    produce(source.zk_connect, "clicks", 2_000, 2, batch=100)
    mirror = mirrors("m1", source, target, topics=["clicks"], **PRESERVE)
    wait_for(lambda: mirrored(source.zk_connect, target.zk_connect, "clicks", exact=True), 60, "the copy")
    assert mirror.terminate() == 0
    seen: list[bytes] = []
    with GroupConsumer("readers", topics=["clicks"], zk=source.zk_connect, auto_commit_ms=100_000) as consumer:
        while len(seen) < 700:
            seen.extend(m.value for m in consumer.poll(1.0, max_messages=100))
        consumer.commit()
    with GroupAdmin(source.zk_connect) as admin:
        committed = {tp: c[:2] for tp, c in admin.offsets("readers").items()}
    out = logferry(
        "group", "copy-offsets", "--from-zk", source.zk_connect, "--to-zk", target.zk_connect, "--group", "readers"
    )
    assert out.returncode == 0, out.stderr
    with GroupAdmin(target.zk_connect) as admin:
        assert {tp: c[:2] for tp, c in admin.offsets("readers").items()} == committed
    rest: list[bytes] = []
    with GroupConsumer("readers", topics=["clicks"], zk=target.zk_connect) as consumer:
        deadline = time.monotonic() + 60
        while len(seen) + len(rest) < 2_000 and time.monotonic() < deadline:
            rest.extend(m.value for m in consumer.poll(1.0))
    # nothing the source group had processed comes again, nothing after it is missing
    assert len(rest) == len(set(rest))
    assert sorted(rest) == sorted(unprocessed_values(source.zk_connect, "clicks", committed))


def unprocessed_values(zk: str, topic: str, committed: dict) -> list[bytes]:
    """Values at or after each partition's committed offset (what the group has not processed)."""
    out: list[bytes] = []
    with SimpleConsumer(zk=zk) as consumer:
        for p in consumer.partitions(topic):
            start, skip = committed.get((topic, p), (consumer.offsets(topic, p).start, 0))
            values = [m.value for m in consumer.messages(topic, p, start=start)]
            out.extend(values[skip:])  # a mid-batch position: its first messages were processed
    return out


def test_a_replicated_target_starting_past_0_replicates_the_copy_to_its_followers(broker_cluster, zookeeper, mirrors):
    source = broker_cluster(
        1,
        broker={"retention_check_ms": 200},
        log={"segment_bytes": 20_000, "retention_bytes": 40_000},
        zk=zookeeper.new_chroot(),
    )
    target = broker_cluster(2, broker={"default_replication_factor": 2}, zk=zookeeper.new_chroot())
    create(source.zk_connect, "old", 1)
    for round_ in range(8):  # one produce request per round, so segments roll
        produce(source.zk_connect, "old", 500, 1, batch=50, tag=str(round_))
    with SimpleConsumer(zk=source.zk_connect) as consumer:
        wait_for(lambda: consumer.offsets("old", 0).start > 0, 30, "retention on the source")
    mirror = mirrors("m1", source, target, topics=["old"], **PRESERVE)
    wait_for(
        lambda: mirrored(source.zk_connect, target.zk_connect, "old", exact=True),
        60,
        "a copy from the source's log start",
    )
    assert_same_offsets(source.zk_connect, target.zk_connect, "old")
    assert mirror.terminate() == 0
    # the follower holds the same bytes from the same offset: stop the leader and read it there
    with Admin(zk=target.zk_connect) as admin:
        wait_for(lambda: len(admin.describe_partitions("old")[0].isr) == 2, 30, "both target replicas in sync")
        leader = admin.describe_partitions("old")[0].leader
    expected = read_batches(source.zk_connect, "old")
    next(b for b in target.brokers if b.id == leader).stop()
    wait_for(
        lambda: read_batches(target.zk_connect, "old") == expected,
        60,
        "the follower, now leader, with the same batches",
    )
    assert_same_offsets(source.zk_connect, target.zk_connect, "old")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_source_leader_kill_then_a_mirror_kill_copy_nothing_twice(broker_cluster, zookeeper, mirrors):
    """Issue 20's pipeline run with 6,000 duplicates, without the agent and the loader.

    The copy there ran in mode produce (the fixture's default): after the source leader
    was killed it committed nothing until the mirror itself was killed, and the restarted
    mirror copied those 12 s again. In mode preserve the restarted mirror resumes from
    the target's end: the target stays the source, offset for offset.
    """
    source = broker_cluster(2, zk=zookeeper.new_chroot())
    target = broker_cluster(1, zk=zookeeper.new_chroot())
    with Admin(zk=source.zk_connect) as admin:
        admin.create_topic("failover", partitions=2, replication_factor=2)
    create(target.zk_connect, "failover", 2)
    mirror = mirrors("m1", source, target, topics=["failover"], **PRESERVE)
    sent = [0]
    error: list[BaseException] = []

    def keep_producing() -> None:
        try:
            with Producer(
                zk=source.zk_connect, acks="all", linger_ms=5, delivery_timeout=60.0, request_timeout=5.0
            ) as producer:
                for i in range(300):
                    producer.send("failover", [b"failover/%d" % (i * 50 + j) for j in range(50)], partition=i % 2)
                    sent[0] += 50
                    time.sleep(0.05)
                producer.flush(90)
        except BaseException as exc:  # surfaced below
            error.append(exc)

    producer = threading.Thread(target=keep_producing)
    producer.start()
    wait_for(lambda: sum(ends(target.zk_connect, "failover").values()) > 0, 60, "copying")
    with Admin(zk=source.zk_connect) as admin:
        leader_id = admin.describe_partitions("failover")[0].leader
    leader = next(b for b in source.brokers if b.id == leader_id)
    leader.kill()
    time.sleep(8)  # past the ZooKeeper session: the follower takes over
    leader.start()
    mirror.kill()
    mirror.start()
    producer.join(180)
    assert not error and not producer.is_alive(), error
    wait_for(
        lambda: mirrored(source.zk_connect, target.zk_connect, "failover", exact=True),
        120,
        "an exact copy after a source leader kill and a mirror kill",
    )
    assert mirror.status().get("mode") == "preserve"
    assert mirror.terminate() == 0
    assert_mirrored(source.zk_connect, target.zk_connect, "failover", exact=True)
    assert_same_offsets(source.zk_connect, target.zk_connect, "failover")
    # (the source's own count is the idempotent producer's business, not the mirror's)
    assert (
        message_count(read_batches(target.zk_connect, "failover"))
        == message_count(read_batches(source.zk_connect, "failover"))
        >= 15_000
    )
