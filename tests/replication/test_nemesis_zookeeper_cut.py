"""Nemesis: ZooKeeper cut from every broker for a bounded time (issue 37).

The nemeses' cluster (tests/support/nemesis.py: three brokers, their ZooKeeper and the
workload on five hosts, replication factor 3, min in-sync replicas 2, a 6 s session).
ZooKeeper's host is partitioned from the three brokers' hosts, both ways (the client
host still reaches it), for its hold (10 s): past the brokers' sessions, so every session
has expired when the cut heals and the brokers come back in new sessions. Every
replica stays up and in sync with its leader all along: nothing can change the ISR or
the leadership without ZooKeeper, so Kafka's leaders go on taking writes. The issue's
target: acknowledged writes go on, no pause over 2 s, including when the sessions come
back. The checker counts what must hold (nothing acknowledged lost, no duplicate,
order, identical replicas); the pauses are reported, not asserted (the results table
is in docs/guarantees.md).

A run lasts about 40 s, in ``make test`` beside the other nemeses; ``scripts/nemesis.sh``
draws when each fault starts and how long it holds (docs/testing.md).
"""

from __future__ import annotations

import pytest

from tests.support.nemesis import MARKS, assert_sound, run_nemesis, three_brokers
from tests.support.network import TestNetwork

pytestmark = MARKS


@pytest.mark.timeout(240)
def test_zookeeper_cut_from_every_broker_loses_no_acknowledged_message(test_network: TestNetwork) -> None:
    cluster = three_brokers(test_network)

    def cut_zookeeper_from_the_brokers() -> str:
        test_network.partition(["zk"], ["b1", "b2", "b3"])
        return "ZooKeeper partitioned from brokers 1, 2 and 3 (the client still reaches it)"

    verdict = run_nemesis(cluster, "ZooKeeper cut from every broker", cut_zookeeper_from_the_brokers)
    assert_sound(verdict)
