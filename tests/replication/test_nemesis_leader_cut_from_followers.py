"""Nemesis: a partition's leader cut from its followers only (issue 37).

The nemeses' cluster (tests/support/nemesis.py). The leader of partition 0 is cut,
both ways, from the two other brokers for its hold (10 s); it still reaches ZooKeeper and
the producer. Its followers stop fetching, so after the replica lag (1.5 s) it shrinks
the ISR to itself, below min in-sync replicas 2: acks=all writes to its partition are
refused until the followers are back (refusing is right there). On the other
partitions the cut broker is a follower that leaves their ISR after the lag. The
checker counts what must hold; the pauses are reported (docs/guarantees.md).

A run lasts about 35 s, in ``make test`` beside the other nemeses; ``scripts/nemesis.sh``
draws when each fault starts and how long it holds (docs/testing.md).
"""

from __future__ import annotations

import pytest

from tests.support.nemesis import MARKS, assert_sound, run_nemesis, three_brokers
from tests.support.network import TestNetwork

pytestmark = MARKS


@pytest.mark.timeout(240)
def test_the_leader_cut_from_its_followers_loses_no_acknowledged_message(test_network: TestNetwork) -> None:
    cluster = three_brokers(test_network)

    def cut_the_leader_of_partition_0_from_its_followers() -> str:
        leader = cluster.leader(0)
        test_network.partition([f"b{leader}"], [f"b{i}" for i in cluster.by_id if i != leader])
        return f"broker {leader}, leader of partition 0, cut from the other brokers (not from ZooKeeper or the client)"

    verdict = run_nemesis(cluster, "leader cut from its followers", cut_the_leader_of_partition_0_from_its_followers)
    assert_sound(verdict)
