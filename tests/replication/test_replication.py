"""Replication with three real brokers: failover loses no acknowledged message.

Every test produces with acks=all into topics with replication factor 3 and
min_insync_replicas 2, causes a failure (kill -9, SIGSTOP, an expired ZooKeeper
session), and then counts: every acknowledged message is readable, in order per
partition, and replicas that are back in sync hold byte-identical logs.
"""

from __future__ import annotations

import json
import random
import time

import pytest

from broker.client import Admin, NotEnoughReplicasError, Producer, SimpleConsumer
from broker.client.connection import Connection
from broker.common.errors import LeaderNotAvailableError, NotLeaderError
from broker.testing.localrun import free_port
from broker.wire import protocol, records
from broker.wire.produce import parse_produce_answer
from tests.replication.conftest import (
    REPLICATED,
    GroupReader,
    Load,
    assert_every_ack_readable_in_order,
    assert_replicas_identical,
    broker_by_id,
    describe,
    full_isr,
    read_partitions,
    replica_bytes,
    wait_until,
)
from tests.support.cli import logferry
from tests.support.metrics import samples, scrape

pytestmark = pytest.mark.integration


def test_kill_9_of_the_leader_keeps_every_acknowledged_message(broker_cluster):
    cluster = broker_cluster(3, broker=REPLICATED)
    topic = "failover"
    with Admin(zk=cluster.zk_connect) as admin:
        assignment = admin.create_topic(topic, 2, replication_factor=3, min_insync_replicas=2)
    assert all(len(set(r)) == 3 for r in assignment.values())
    load = Load(cluster, topic, 2).start()
    try:
        load.wait_for_acks(3000, 60, "acks before the kill")
        old_leader = describe(cluster, topic)[0].leader
        broker_by_id(cluster, old_leader).kill()
        # Production goes on through the new leader.
        load.wait_for_acks(3000, 60, "acks after the kill")
    finally:
        load.stop()
    assert not load.failed, f"deliveries failed: {load.failed[:3]}"
    state = describe(cluster, topic)
    assert state[0].leader not in (old_leader, -1)
    assert old_leader not in state[0].isr
    consumed = read_partitions(cluster, topic, 2)
    assert_every_ack_readable_in_order(load, consumed)
    # The old leader comes back, compares its tail with the new leader's, and rejoins.
    broker_by_id(cluster, old_leader).start()
    wait_until(full_isr(cluster, topic), 40, "the old leader back in every ISR")
    assert_replicas_identical(cluster, topic, 2)
    text = broker_by_id(cluster, old_leader).log_text()
    assert "following broker" in text and "log agrees with the leader" in text


def test_two_of_three_down_refuses_acks_all_and_keeps_committed_data(broker_cluster):
    cluster = broker_cluster(3, broker=REPLICATED)
    topic = "quorum"
    with Admin(zk=cluster.zk_connect) as admin:
        admin.create_topic(topic, 1, replication_factor=3, min_insync_replicas=2)
    committed = [b"committed-%05d" % i for i in range(2000)]
    with Producer(zk=cluster.zk_connect, acks="all") as producer:
        for i in range(0, len(committed), 100):
            producer.send(topic, committed[i : i + 100], partition=0).wait(30)
    leader = describe(cluster, topic)[0].leader
    survivor = next(b for b in cluster.brokers if b.id != leader)
    for broker in cluster.brokers:
        if broker is not survivor:
            broker.kill()
    wait_until(
        lambda: describe(cluster, topic)[0].isr == [survivor.id] and describe(cluster, topic)[0].leader == survivor.id,
        30,
        "the survivor alone in the ISR, leading",
    )
    with Producer(zk=cluster.zk_connect, acks="all", delivery_timeout=4) as producer:
        future = producer.send(topic, [b"refused"], partition=0)
        with pytest.raises(NotEnoughReplicasError, match="min_insync_replicas=2"):
            future.wait(30)
    with SimpleConsumer(zk=cluster.zk_connect) as consumer:
        values = [m.value for m in consumer.messages(topic, 0, follow=True, timeout=1.0)]
    assert values == committed  # all of it, in order, and nothing refused slipped in
    # One broker back: two in sync again, acks=all accepted again.
    back = next(b for b in cluster.brokers if b is not survivor)
    back.start()
    wait_until(lambda: len(describe(cluster, topic)[0].isr) == 2, 40, "a second ISR member")
    with Producer(zk=cluster.zk_connect, acks="all") as producer:
        producer.send(topic, [b"accepted"], partition=0).wait(30)


def test_paused_follower_leaves_the_isr_and_rejoins(broker_cluster):
    # A session long enough that ZooKeeper does not expire the paused broker: the ISR
    # shrinks because the leader sees the follower fall behind.
    settings = {**REPLICATED, "zk_session_timeout_s": 10.0, "replica_lag_time_max_ms": 1000}
    cluster = broker_cluster(3, broker=settings)
    topic = "paused"
    with Admin(zk=cluster.zk_connect) as admin:
        admin.create_topic(topic, 1, replication_factor=3, min_insync_replicas=2)
    load = Load(cluster, topic, 1).start()
    try:
        load.wait_for_acks(1000, 60, "acks before the pause")
        info = describe(cluster, topic)[0]
        follower = broker_by_id(cluster, next(r for r in info.replicas if r != info.leader))
        leader = broker_by_id(cluster, info.leader)
        follower.pause()
        try:
            wait_until(
                lambda: follower.id not in describe(cluster, topic, follower)[0].isr,
                8,
                "the paused follower out of the ISR",
            )
            load.wait_for_acks(1000, 30, "acks=all with two in sync while paused")
        finally:
            follower.resume()
        wait_until(full_isr(cluster, topic), 30, "the follower back in the ISR")
        load.wait_for_acks(500, 30, "acks after the follower returned")
    finally:
        load.stop()
    assert not load.failed
    log = leader.log_text()
    assert "isr shrank" in log and "isr grew" in log
    assert_every_ack_readable_in_order(load, read_partitions(cluster, topic, 1))
    assert_replicas_identical(cluster, topic, 1)


@pytest.mark.slow
def test_random_broker_kills_lose_nothing(broker_cluster):
    cluster = broker_cluster(3, broker=REPLICATED)
    topic = "chaos"
    with Admin(zk=cluster.zk_connect) as admin:
        admin.create_topic(topic, 3, replication_factor=3, min_insync_replicas=2)
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    print(f"random kill seed {seed}")
    load = Load(cluster, topic, 3).start()
    reader = GroupReader(cluster, topic)
    try:
        load.wait_for_acks(1000, 60, "acks before the first kill")
        for _ in range(4):  # bounded: four kill-and-restart rounds
            victim = rng.choice(cluster.brokers)
            victim.kill()
            time.sleep(rng.uniform(0.5, 2.0))
            victim.start()
            wait_until(full_isr(cluster, topic), 60, f"broker {victim.id} back in sync")
            load.wait_for_acks(500, 60, "acks after a restart")
    finally:
        load.stop()
        try:
            # The live reader catches up with everything acknowledged (bounded).
            wait_until(
                lambda: reader.distinct() >= load.acked_count,
                60,
                "the group consumer to read every acknowledged message",
            )
        finally:
            reader.close()
    assert not load.failed, f"deliveries failed (seed {seed}): {load.failed[:3]}"
    sent = sum(len(s) for s in load.sent.values())
    assert reader.distinct() == load.acked_count == sent
    assert_every_ack_readable_in_order(load, reader.values)
    consumed = read_partitions(cluster, topic, 3)
    assert_every_ack_readable_in_order(load, consumed)
    assert sum(len(set(v)) for v in consumed.values()) == sent
    assert_replicas_identical(cluster, topic, 3)


def _produce_one(address: str, topic: str, value: bytes) -> int:
    """Send one acks=1 produce straight to one broker; returns the part's error code."""
    host, port = address.split(":")
    batch = records.encode_batch([value], None, int(time.time() * 1000))
    conn = Connection(host, int(port), connect_timeout=2)
    try:
        frame = conn.request(protocol.PRODUCE, {"acks": 1, "parts": [[topic, 0, len(batch)]]}, [batch]).result(5)
        return parse_produce_answer(frame.header)[0].error
    finally:
        conn.close()


def test_leader_whose_session_expired_accepts_no_write(broker_cluster):
    cluster = broker_cluster(3, broker=REPLICATED)
    topic = "zombie"
    with Admin(zk=cluster.zk_connect) as admin:
        admin.create_topic(topic, 1, replication_factor=3, min_insync_replicas=2)
    producer = Producer(zk=cluster.zk_connect, acks="all", request_timeout=30)
    try:
        producer.send(topic, [b"before-%d" % i for i in range(500)], partition=0).wait(30)
        old = broker_by_id(cluster, describe(cluster, topic)[0].leader)
        # Freeze the leader past its session timeout: ZooKeeper expires the session and
        # the controller elects another leader while the old one still believes it leads.
        old.pause()
        try:
            # Sent to the frozen leader, whose kernel takes the bytes and never answers:
            # the producer must give the request up for the new leader once it is
            # elected (3 s session), not wait for its 30 s request timeout.
            frozen_at = time.monotonic()
            during = producer.send(topic, [b"during-%d" % i for i in range(100)], partition=0)
            during.wait(20)
            print(f"acknowledged {time.monotonic() - frozen_at:.1f}s after the leader froze")
            new_id = wait_until(
                lambda: (lambda i: i.leader if i.leader not in (old.id, -1) else None)(
                    describe(cluster, topic, old)[0]
                ),
                30,
                "a new leader",
            )
        finally:
            old.resume()
    finally:
        producer.close()
    new = broker_by_id(cluster, new_id)
    accepted_by_old = []
    accepted = []
    deadline = time.monotonic() + 5
    i = 0
    while time.monotonic() < deadline:  # bounded: 5 s of writes to both
        for broker in (old, new):
            value = b"after-%d-%d" % (broker.id, i)
            try:
                code = _produce_one(broker.address, topic, value)
            except Exception:
                continue  # e.g. the old leader still busy reconnecting
            if code == 0:
                (accepted_by_old if broker is old else accepted).append(value)
            else:
                assert code in (NotLeaderError.code, LeaderNotAvailableError.code), code
        i += 1
        time.sleep(0.05)
    assert not accepted_by_old, f"the old leader accepted {len(accepted_by_old)} writes"
    assert accepted, "the new leader accepted no write"
    wait_until(full_isr(cluster, topic), 40, "the old leader back in the ISR")
    with SimpleConsumer(zk=cluster.zk_connect) as consumer:
        values = [m.value for m in consumer.messages(topic, 0, follow=True, timeout=1.0)]
    assert values[:600] == [b"before-%d" % i for i in range(500)] + [b"during-%d" % i for i in range(100)]
    assert len(set(values)) == len(values)  # the retried batch stored once
    assert set(accepted) <= set(values)
    assert_replicas_identical(cluster, topic, 1)


def _cli(cluster, *args: str) -> str:
    result = logferry(*args, "--zk", cluster.zk_connect)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_cli_shows_replicas_lists_under_replicated_and_elects_preferred_leaders(broker_cluster):
    cluster = broker_cluster(3, broker=REPLICATED)
    out = _cli(cluster, "topic", "create", "shown", "-p", "3", "-r", "3", "--min-insync", "2")
    assert "replication factor 3" in out
    described = _cli(cluster, "topic", "describe", "shown")
    rows = [line.split() for line in described.splitlines()[2:]]
    assert len(rows) == 3 and all(len(row[4].split(",")) == 3 for row in rows)
    assert _cli(cluster, "topic", "list", "--under-replicated") == ""  # none: nothing listed
    preferred = describe(cluster, "shown")[0].replicas[0]
    victim = broker_by_id(cluster, preferred)
    victim.kill()
    wait_until(
        lambda: all(victim.id not in i.isr for i in describe(cluster, "shown").values()),
        30,
        "the killed broker out of every ISR",
    )
    listed = _cli(cluster, "topic", "list", "--under-replicated")
    assert listed.count("under-replicated") == 3  # every partition has a replica there
    assert describe(cluster, "shown")[0].leader != preferred
    victim.start()
    wait_until(full_isr(cluster, "shown"), 40, "the broker back in every ISR")
    assert "elect preferred leaders" in _cli(cluster, "topic", "elect-leaders")
    wait_until(
        lambda: all(i.leader == i.replicas[0] for i in describe(cluster, "shown").values()),
        30,
        "every partition led by its preferred replica",
    )


def _metrics(broker) -> dict[str, float]:
    """Samples by ``name{label="value",...}`` without the prefix, labels in the order
    written in the assertions below (topic before partition)."""
    text = scrape(f"http://127.0.0.1:{broker.metrics_port}/metrics")
    order = {"topic": 0, "partition": 1}
    values = {}
    for (name, labels), number in samples(text).items():
        ordered = sorted(labels, key=lambda kv: (order.get(kv[0], 2), kv[0]))
        label_text = ",".join(f'{k}="{v}"' for k, v in ordered)
        key = name.removeprefix("logferry_") + (f"{{{label_text}}}" if label_text else "")
        values[key] = number
    return values


def test_metrics_show_roles_under_replication_and_the_controller(broker_cluster):
    cluster = broker_cluster(0)
    for _ in range(3):
        port = free_port()
        cluster.add({**REPLICATED, "metrics_port": port}).metrics_port = port
    with Admin(zk=cluster.zk_connect) as admin:
        admin.create_topic("watched", 1, replication_factor=3, min_insync_replicas=2)
    with Producer(zk=cluster.zk_connect, acks="all") as producer:
        producer.send("watched", [b"m"] * 1000, partition=0).wait(30)
    info = describe(cluster, "watched")[0]
    leader = broker_by_id(cluster, info.leader)
    before = _metrics(leader)
    assert before['partitions{role="leader"}'] == 1
    assert before["under_replicated_partitions"] == 0
    assert before['isr_size{topic="watched",partition="0"}'] == 3
    assert sum(_metrics(b)["controller_active"] for b in cluster.brokers) == 1
    follower = next(b for b in cluster.brokers if b.id not in (leader.id,))
    assert _metrics(follower)['partitions{role="follower"}'] == 1
    assert _metrics(follower)['replica_bytes_in_total{topic="watched",partition="0"}'] > 0
    follower.kill()
    wait_until(
        lambda: _metrics(leader)["under_replicated_partitions"] == 1,
        30,
        "the leader to report the partition under-replicated",
    )
    assert _metrics(leader)['isr_size{topic="watched",partition="0"}'] == 2


def test_deleting_a_replicated_topic_removes_every_replica_and_allows_recreation(broker_cluster):
    cluster = broker_cluster(3, broker=REPLICATED)
    with Admin(zk=cluster.zk_connect) as admin:
        admin.create_topic("doomed", 3, replication_factor=3)
        with Producer(zk=cluster.zk_connect, acks="all") as producer:
            for p in range(3):
                producer.send("doomed", [b"old"] * 100, partition=p).wait(30)
        assert all(len(list(b.log_dir.glob("doomed-*"))) == 3 for b in cluster.brokers)
        admin.delete_topic("doomed")
        wait_until(
            lambda: not any(list(b.log_dir.glob("doomed-*")) for b in cluster.brokers),
            30,
            "every replica's directory removed",
        )
        assert "doomed" not in admin.list_topics()
        admin.create_topic("doomed", 2, replication_factor=2)
    wait_until(
        lambda: all(i.leader >= 0 and len(i.isr) == 2 for i in describe(cluster, "doomed").values()),
        30,
        "the new topic's partitions led and in sync",
    )
    with Producer(zk=cluster.zk_connect, acks="all") as producer:
        producer.send("doomed", [b"new"], partition=1).wait(30)
    with SimpleConsumer(zk=cluster.zk_connect) as consumer:
        assert [m.value for m in consumer.messages("doomed", 1, follow=True, timeout=1.0)] == [b"new"]


def test_a_topic_recreated_while_a_replica_was_down_does_not_adopt_its_old_log(broker_cluster):
    """Deleted and created again while one replica's broker was dead but still
    registered (inside its session timeout): that broker comes back with the old
    topic's bytes, which must go, not be served or merged as the new topic's."""
    cluster = broker_cluster(3, broker=REPLICATED)
    topic = "reborn"
    with Admin(zk=cluster.zk_connect) as admin:
        admin.create_topic(topic, 1, replication_factor=3, min_insync_replicas=2)
        # Records of one format make batches of one size: the old log's end is then
        # a batch boundary in the new topic's longer log, and fetching from there
        # would simply append the new topic's bytes to the old ones.
        with Producer(zk=cluster.zk_connect, acks="all") as producer:
            for b in range(30):
                producer.send(topic, [b"old-%05d" % (b * 10 + i) for i in range(10)], partition=0).wait(30)
        leader = describe(cluster, topic)[0].leader
        away = next(b for b in cluster.brokers if b.id != leader)
        # Its high-watermark checkpoint (written every 5 s) records the old topic's
        # mark: below it a returning follower takes its log as agreed with the leader.
        checkpoint = away.log_dir / "replication-offset-checkpoint"
        wait_until(
            lambda: json.loads(checkpoint.read_text()).get(f"{topic}-0", 0) > 0,
            30,
            "the old topic's high watermark in the checkpoint",
        )
        away.kill()
        admin.delete_topic(topic)
        replicas = admin.create_topic(topic, 1, replication_factor=3, min_insync_replicas=2)
    assert away.id in replicas[0], "the dead broker's session expired before the re-creation"
    new = [b"new-%05d" % i for i in range(600)]
    with Producer(zk=cluster.zk_connect, acks="all") as producer:
        for b in range(60):
            producer.send(topic, new[b * 10 : (b + 1) * 10], partition=0).wait(60)
    away.start()
    wait_until(full_isr(cluster, topic), 60, "the returning broker back in the ISR")
    assert "belongs to an earlier topic of this name" in away.log_text()
    assert_replicas_identical(cluster, topic, 1)
    assert b"old-" not in replica_bytes(away, topic, 0)
    with SimpleConsumer(zk=cluster.zk_connect) as consumer:
        assert [m.value for m in consumer.messages(topic, 0, follow=True, timeout=1.0)] == new


def test_a_returning_replica_cuts_the_tail_its_new_leader_never_had(broker_cluster):
    cluster = broker_cluster(3, broker=REPLICATED)
    topic = "diverge"
    with Admin(zk=cluster.zk_connect) as admin:
        admin.create_topic(topic, 1, replication_factor=3, min_insync_replicas=2)
    committed = [b"committed-%d" % i for i in range(100)]
    with Producer(zk=cluster.zk_connect, acks="all") as producer:
        producer.send(topic, committed, partition=0).wait(30)
    old = broker_by_id(cluster, describe(cluster, topic)[0].leader)
    old.kill()
    wait_until(lambda: describe(cluster, topic, old)[0].leader not in (old.id, -1), 30, "a new leader")
    later = [b"later-%d" % i for i in range(50)]
    with Producer(zk=cluster.zk_connect, acks="all") as producer:
        producer.send(topic, later, partition=0).wait(30)
    # The dead leader's log gets a valid batch the others never saw, where the new
    # leader has other bytes: what an acks=1 write that never reached a follower leaves.
    segment = max((old.log_dir / f"{topic}-0").glob("*.log"))
    phantom = records.encode_batch([b"phantom-%d" % i for i in range(30)], None, int(time.time() * 1000))
    with segment.open("ab") as f:
        f.write(phantom)
    old.start()
    wait_until(full_isr(cluster, topic), 40, "the returning broker back in the ISR")
    assert_replicas_identical(cluster, topic, 1)
    log = old.log_text()
    assert "truncated" in log and "bytes after it that the leader does not have" in log
    with SimpleConsumer(zk=cluster.zk_connect) as consumer:
        values = [m.value for m in consumer.messages(topic, 0, follow=True, timeout=1.0)]
    assert values == committed + later


def test_while_zookeeper_is_down_acks_all_writes_go_on_and_brokers_stop_promptly(broker_cluster, zookeeper):
    """With ZooKeeper gone and every replica up, the ISR cannot change, so leaders take
    acks=all writes (Kafka's rule; the nemesis "ZooKeeper cut from every broker" found
    every partition refusing them) and refuse acks=1 ones, which a replaced leader would
    acknowledge and lose. Controller, followers and registry all talk to ZooKeeper;
    with it gone a stop must still finish (kazoo would wait for ever on a call made
    while reconnecting)."""
    cluster = broker_cluster(3, broker=REPLICATED)
    topic = "outage"
    with Admin(zk=cluster.zk_connect) as admin:
        admin.create_topic(topic, 3, replication_factor=3, min_insync_replicas=2)
    addresses = [b.address for b in cluster.brokers]
    # A producer running when ZooKeeper goes: it has its producer id (a new idempotent
    # producer would wait for one, unless the broker it asks holds a block of them).
    producer = Producer(brokers=addresses, acks="all", delivery_timeout=20)
    for p in range(3):
        producer.send(topic, [b"%d-%d" % (p, i) for i in range(200)], partition=p).wait(30)
    leaders = {p: broker_by_id(cluster, i.leader) for p, i in describe(cluster, topic).items()}
    zookeeper.stop()
    try:
        time.sleep(REPLICATED["zk_session_timeout_s"])  # every broker is reconnecting
        try:
            for p in range(3):
                producer.send(topic, [b"%d-during-%d" % (p, i) for i in range(50)], partition=p).wait(20)
        finally:
            producer.close()
        assert _produce_one(leaders[0].address, topic, b"acks-1") == NotLeaderError.code
        with SimpleConsumer(brokers=addresses) as consumer:
            for p in range(3):  # following briefly: the high watermark may trail the last ack
                values = [m.value for m in consumer.messages(topic, p, follow=True, timeout=0.3)]
                assert values == [b"%d-%d" % (p, i) for i in range(200)] + [b"%d-during-%d" % (p, i) for i in range(50)]
        for broker in cluster.brokers:
            # stop() fails past its timeout: a broker stuck on ZooKeeper never returns
            # (how fast a stop is, is a benchmark's figure, not this test's).
            assert broker.stop(timeout=20) == 0, broker.log_tail()
            assert "stopped cleanly" in broker.log_text()
    finally:
        zookeeper.start()
