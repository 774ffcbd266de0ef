"""Nemesis: a partition's leader cut from ZooKeeper only (issue 37).

The nemeses' cluster (tests/support/nemesis.py). The leader of partition 0 loses
ZooKeeper (both ways) for its hold (10 s), past its 6 s session, while it still reaches its
followers and the producer: its session expires, the controller elects another leader,
and the old one, still believing it leads until ZooKeeper is back, goes on taking the
producer's acks=all writes (leaders take them while ZooKeeper is away, Kafka's rule,
docs/replication.md#fencing-a-stale-leader). It must confirm none of them once its
followers follow the new leader: the checker counts nothing acknowledged lost, no
duplicate, order and identical replicas. This is the case that rule's safety rests on.

A run lasts about 30 s, in ``make test`` beside the other nemeses; ``scripts/nemesis.sh``
draws when each fault starts and how long it holds (docs/testing.md).
"""

from __future__ import annotations

import pytest

from tests.support.nemesis import MARKS, assert_sound, run_nemesis, three_brokers
from tests.support.network import TestNetwork

pytestmark = MARKS


@pytest.mark.timeout(240)
def test_the_leader_cut_from_zookeeper_loses_no_acknowledged_message(test_network: TestNetwork) -> None:
    cluster = three_brokers(test_network)

    def cut_the_leader_of_partition_0_from_zookeeper() -> str:
        leader = cluster.leader(0)
        test_network.partition([f"b{leader}"], ["zk"])
        return f"broker {leader}, leader of partition 0, cut from ZooKeeper (not from the others)"

    verdict = run_nemesis(cluster, "leader cut from ZooKeeper", cut_the_leader_of_partition_0_from_zookeeper)
    assert_sound(verdict)
