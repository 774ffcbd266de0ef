"""Nemesis: the leader isolated, then the leader elected in its place killed (issue 37).

A combined nemesis on the nemeses' cluster (tests/support/nemesis.py): the leader of
partition 0 has its cable pulled; once ZooKeeper names another leader (the old one's
6 s session expired), that new leader is killed with kill -9. The third broker is then
the partition's only live in-sync replica: once the killed one's session expires it is
elected, with an ISR of itself, below min in-sync replicas 2, so acks=all writes to the
partition are refused until the others are back. At the heal the cable is back and the
killed broker is started again; the old leader returns holding what it appended alone
(never acknowledged) and must cut it. The checker counts what must hold (nothing
acknowledged lost, no duplicate, order, identical replicas, no two leaders).
"""

from __future__ import annotations

import pytest

from broker.coordination.partition_state import PartitionState
from tests.support.nemesis import MARKS, assert_sound, run_nemesis, three_brokers
from tests.support.network import TestNetwork

pytestmark = MARKS


@pytest.mark.timeout(300)
def test_the_leader_isolated_then_its_successor_killed_loses_no_acknowledged_message(
    test_network: TestNetwork,
) -> None:
    cluster = three_brokers(test_network)
    seen: dict[str, int] = {}

    def isolate_the_leader_of_partition_0() -> str:
        old = seen["old"] = cluster.leader(0)
        test_network.cut(f"b{old}")
        return f"isolated broker {old}, leader of partition 0"

    def kill_its_successor() -> str:
        def elected(states: dict[int, PartitionState]) -> bool:
            return states[0].leader not in (seen["old"], -1)

        new = seen["new"] = cluster.wait_for_states(elected, "a new leader of partition 0")[0].leader
        cluster.kill(new)
        return f"broker {new}, elected in its place, killed (kill -9)"

    def start_the_killed_broker() -> str:
        cluster.by_id[seen["new"]].start()
        return f"broker {seen['new']} started again"

    verdict = run_nemesis(
        cluster,
        "leader isolated, successor killed",
        isolate_the_leader_of_partition_0,
        then=kill_its_successor,
        heal=start_the_killed_broker,
    )
    assert_sound(verdict)
