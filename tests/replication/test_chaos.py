"""Random failures of every kind the replication tests cause one at a time, mixed.

For a bounded time (45 s; ``LOGFERRY_CHAOS_SECONDS`` for longer runs) a seeded random
sequence of failures hits a 3-broker cluster while an acks=all producer and a group
consumer run: kill -9 of one broker, kill -9 of two at once (acks=all is refused until
one is back, and the producer retries), SIGSTOP of one for up to twice the session
timeout (so sometimes it is expired and replaced while frozen), and clean stops. Then
every broker is back and the count must hold: every acknowledged message readable in
order per partition, by the live consumer and by a fresh read, nothing sent that was
not acknowledged, and byte-identical replicas. The seed is printed; ``LOGFERRY_CHAOS_SEED``
replays a sequence.
"""

from __future__ import annotations

import os
import random
import time

import pytest

from broker.client import Admin
from tests.replication.conftest import (
    REPLICATED,
    GroupReader,
    Load,
    assert_every_ack_readable_in_order,
    assert_replicas_identical,
    full_isr,
    read_partitions,
    wait_until,
)

pytestmark = pytest.mark.integration

ACTIONS = ("kill", "kill two", "pause", "clean stop")


@pytest.mark.slow
@pytest.mark.timeout(600)  # 45 s of failures, then up to several minutes of catching up
def test_mixed_random_failures_lose_no_acknowledged_message(broker_cluster):
    cluster = broker_cluster(3, broker=REPLICATED)
    topic = "mayhem"
    with Admin(zk=cluster.zk_connect) as admin:
        admin.create_topic(topic, 3, replication_factor=3, min_insync_replicas=2)
    seed = int(os.environ.get("LOGFERRY_CHAOS_SEED", random.randrange(1 << 30)))
    seconds = float(os.environ.get("LOGFERRY_CHAOS_SECONDS", "45"))
    rng = random.Random(seed)
    print(f"chaos seed {seed}, {seconds:.0f} s")
    session = REPLICATED["zk_session_timeout_s"]
    load = Load(cluster, topic, 3).start()
    reader = GroupReader(cluster, topic)
    done: list[str] = []
    try:
        load.wait_for_acks(1000, 60, "acks before the first failure")
        end = time.monotonic() + seconds
        for _ in range(200):  # bounded in count as well as in time
            if time.monotonic() >= end:
                break
            action = rng.choice(ACTIONS)
            victims = rng.sample(cluster.brokers, 2 if action == "kill two" else 1)
            done.append(f"{action} {[v.id for v in victims]}")
            if action == "pause":
                victims[0].pause()
                try:
                    time.sleep(rng.uniform(0.5, 2 * session))
                finally:
                    victims[0].resume()
            else:
                for victim in victims:
                    if action == "clean stop":
                        victim.stop()
                    else:
                        victim.kill()
                time.sleep(rng.uniform(0.2, 4.0))
                for victim in victims:
                    victim.start()
            time.sleep(rng.uniform(0.0, 3.0))
        print("failures:", "; ".join(done))
        wait_until(full_isr(cluster, topic), 90, "every broker back in every ISR")
        load.wait_for_acks(300, 60, "acks after the last failure")
    finally:
        load.stop()
        try:
            wait_until(
                lambda: reader.distinct() >= load.acked_count,
                90,
                "the group consumer to read every acknowledged message",
            )
        finally:
            reader.close()
    sent = sum(len(s) for s in load.sent.values())
    print(f"sent {sent:,}, acknowledged {load.acked_count:,}, failed {len(load.failed)}")
    assert len(done) >= 3, f"only {len(done)} failures caused"
    assert not load.failed, f"deliveries failed (seed {seed}): {load.failed[:3]}"
    assert load.acked_count == sent
    assert reader.distinct() == sent
    assert_every_ack_readable_in_order(load, reader.values)
    consumed = read_partitions(cluster, topic, 3)
    assert_every_ack_readable_in_order(load, consumed)
    assert sum(len(set(v)) for v in consumed.values()) == sent
    assert_replicas_identical(cluster, topic, 3)
