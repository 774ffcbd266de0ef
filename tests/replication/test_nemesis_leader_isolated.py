"""Nemesis: a partition's leader isolated from everything for a bounded time (issue 37).

Three brokers on three hosts of the test network, their ZooKeeper on a fourth and the
workload (an idempotent acks=all producer, tests/support/workload.py) on a fifth;
replication factor 3, min in-sync replicas 2. The leader of partition 0 has its cable
pulled (its port on the switch down) for ``FAULT_S``, past its ZooKeeper session, so a
new leader is elected while the old one still believes it leads. Then the cable is back,
every replica returns to the ISR, and the checker (tests/support/checker.py) counts:
acknowledged messages lost, duplicates, order per partition, replicas byte-identical
below the high watermark (all must be 0), and prints the seconds each partition
acknowledged nothing (the issue's target: within 8 s of the fault; reported, not asserted,
as this run measures what the fault costs today).

A run holds its fault for 10 s and lasts about 40 s, too long for ``make test``'s
budget: it runs when ``LOGFERRY_NEMESIS=1`` (``scripts/nemesis.sh`` runs it, several
times if asked).
"""

from __future__ import annotations

import os
import time

import pytest

from broker.client import Admin, SimpleConsumer
from tests.replication.conftest import REPLICATED
from tests.support.checker import check, read_partition
from tests.support.network import TestNetwork
from tests.support.waiting import wait_until
from tests.support.workload import Workload

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("LOGFERRY_NEMESIS") != "1", reason="a nemesis: run by scripts/nemesis.sh (LOGFERRY_NEMESIS=1)"
    ),
]

TOPIC = "jepsen"
PARTITIONS = 3
FAULT_S = float(os.environ.get("LOGFERRY_NEMESIS_FAULT_S", "10"))
"""How long the leader is isolated: past its 6 s ZooKeeper session (10 s unless
``LOGFERRY_NEMESIS_FAULT_S`` says otherwise)."""
SETTINGS = {**REPLICATED, "zk_session_timeout_s": 6.0}
"""The replication tests' settings (RF 3, min ISR 2, 1.5 s replica lag) with the
issue's 6 s ZooKeeper session."""


def _replica_bytes(net: TestNetwork, partition: int, end: int) -> list[bytes]:
    """Each broker's bytes of ``partition`` below ``end`` (its segments, in order)."""
    out = []
    for broker in net.brokers:
        directory = broker.log_dir / f"{TOPIC}-{partition}"
        out.append(b"".join(path.read_bytes() for path in sorted(directory.glob("*.log")))[:end])
    return out


def _full_isr(net: TestNetwork) -> bool:
    """Every broker reports every partition led and every replica in sync."""
    for broker in net.brokers:
        try:
            with Admin(brokers=[broker.address], request_timeout=3) as admin:
                parts = admin.describe_partitions(TOPIC)
        except Exception:
            return False
        if len(parts) != PARTITIONS or not all(i.leader >= 0 and len(i.isr) == 3 for i in parts.values()):
            return False
    return True


@pytest.mark.timeout(240)
def test_the_leader_isolated_loses_no_acknowledged_message(test_network: TestNetwork) -> None:
    net = test_network
    net.switch("lan")
    zk = net.zookeeper(net.host("zk", "lan"))
    zk_connect = f"{zk.hosts}/nemesis"
    for i in (1, 2, 3):
        net.broker(net.host(f"b{i}", "lan"), i, zk_connect, broker=SETTINGS)
    client = net.host("client", "lan")
    by_id = {b.id: b for b in net.brokers}

    with client.inside():
        with Admin(zk=zk_connect) as admin:
            admin.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
        wait_until(lambda: _full_isr(net), 30, "every replica in sync", interval=0.2)
        workload = Workload(zk_connect, TOPIC, PARTITIONS).start()
        try:
            wait_until(lambda: workload.acked_count() >= 2_000, 30, "2,000 acknowledged before the fault")
            with Admin(zk=zk_connect) as admin:
                leader = admin.describe_partitions(TOPIC)[0].leader
            victim = by_id[leader]
            net.cut(f"b{leader}")
            fault_at = time.monotonic()
            print(f"isolated broker {leader} ({victim.address}), leader of partition 0, for {FAULT_S:g}s")
            time.sleep(FAULT_S)  # the fault itself: time is the scenario
            net.heal()
            healed_at = time.monotonic()
            wait_until(lambda: _full_isr(net), 90, "every replica back in sync", interval=0.5)
            for p in range(PARTITIONS):  # each partition acknowledges again
                wait_until(
                    lambda p=p: (workload.last_ack(p) or 0) > healed_at, 60, f"partition {p} acknowledging again"
                )
            in_sync_s = time.monotonic() - healed_at
        finally:
            workload.stop()
        until = time.monotonic()

        stored: dict[int, list[bytes]] = {}
        ends: dict[int, int] = {}
        with SimpleConsumer(zk=zk_connect) as consumer:
            for p in range(PARTITIONS):
                stored[p], ends[p] = read_partition(consumer, TOPIC, p)
    wait_until(  # followers fetch up to the high watermark: every replica holds it
        lambda: all(len(c) == ends[p] for p in range(PARTITIONS) for c in _replica_bytes(net, p, ends[p])),
        30,
        "every replica to hold the high watermark",
    )
    replicas = {p: _replica_bytes(net, p, ends[p]) for p in range(PARTITIONS)}

    verdict = check(workload.batches, stored, replicas, fault_at, until)
    print(f"leader isolated {FAULT_S:g}s: {verdict.summary()}; full ISR {in_sync_s:.1f}s after the heal")
    assert not verdict.problems(), f"{verdict.problems()}: {verdict.examples}"
    assert verdict.acked > 2_000 and verdict.stored >= verdict.acked  # sent N, acknowledged N, stored N
    assert verdict.unknown == 0  # every batch got its outcome
    assert max(verdict.unavailable_s.values()) > 0
