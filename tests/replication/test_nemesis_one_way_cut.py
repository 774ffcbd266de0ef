"""Nemesis: a one-way cut, everything the leader sends dropped (issue 37).

The nemeses' cluster (tests/support/nemesis.py). For its hold (10 s) the leader of
partition 0 can send to no other host (a blackhole route toward each: its own sends
fail at once), while what the others send it still arrives: it hears the producer,
its followers' fetches and ZooKeeper's answers' retransmissions, but answers nobody.
Its session expires (its pings never leave), another leader is elected, and the old
one learns nothing until the cut heals. The checker counts what must hold; the pauses
are reported (docs/guarantees.md).

A run lasts about 35 s, in ``make test`` beside the other nemeses; ``scripts/nemesis.sh``
draws when each fault starts and how long it holds (docs/testing.md).
"""

from __future__ import annotations

import pytest

from tests.support.nemesis import MARKS, assert_sound, run_nemesis, three_brokers
from tests.support.network import TestNetwork

pytestmark = MARKS


@pytest.mark.timeout(240)
def test_a_one_way_cut_of_the_leader_loses_no_acknowledged_message(test_network: TestNetwork) -> None:
    cluster = three_brokers(test_network)

    def drop_what_the_leader_of_partition_0_sends() -> str:
        leader = cluster.leader(0)
        for other in test_network.hosts:
            if other != f"b{leader}":
                test_network.block(f"b{leader}", other)
        return f"everything broker {leader}, leader of partition 0, sends dropped (what it is sent arrives)"

    verdict = run_nemesis(cluster, "one-way cut of the leader", drop_what_the_leader_of_partition_0_sends)
    assert_sound(verdict)
