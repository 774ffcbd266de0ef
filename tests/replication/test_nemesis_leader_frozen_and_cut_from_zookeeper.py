"""Nemesis: the leader frozen past its session, then resumed cut from ZooKeeper (issue 37).

A combined nemesis on the nemeses' cluster (tests/support/nemesis.py): the leader of
partition 0 is cut from ZooKeeper (both ways) and frozen with SIGSTOP at the same moment.
Its session expires and the controller elects another leader. Then it is resumed
(SIGCONT), still cut from ZooKeeper: a zombie that believes it leads, with acks=all
answers it was holding when frozen, reaching its former followers and the producer.
Its followers now fetch from the new leader, so it can confirm nothing it appends; the
producer's leader check moves to the new leader. At the heal it finds its session
gone, follows, and cuts what it appended alone. The checker counts what must hold
(nothing acknowledged lost, no duplicate, order, identical replicas, no partition epoch
answered by two brokers, no replaced leader answering on).
"""

from __future__ import annotations

import pytest

from broker.coordination.partition_state import PartitionState
from tests.support.nemesis import MARKS, assert_sound, run_nemesis, three_brokers
from tests.support.network import TestNetwork

pytestmark = MARKS


@pytest.mark.timeout(300)
def test_the_leader_frozen_and_resumed_cut_from_zookeeper_loses_no_acknowledged_message(
    test_network: TestNetwork,
) -> None:
    cluster = three_brokers(test_network)
    seen: dict[str, int] = {}

    def freeze_the_leader_cut_from_zookeeper() -> str:
        old = seen["old"] = cluster.leader(0)
        test_network.partition([f"b{old}"], ["zk"])
        cluster.by_id[old].pause()
        return f"broker {old}, leader of partition 0, cut from ZooKeeper and frozen (SIGSTOP)"

    def resume_it_once_replaced() -> str:
        def elected(states: dict[int, PartitionState]) -> bool:
            return states[0].leader not in (seen["old"], -1)

        new = cluster.wait_for_states(elected, "a new leader of partition 0")[0].leader
        cluster.by_id[seen["old"]].resume()
        return f"broker {new} elected; broker {seen['old']} resumed (SIGCONT), still cut from ZooKeeper"

    def resume() -> str:
        cluster.by_id[seen["old"]].resume()  # again: a no-op unless the election never came
        return "cut healed"

    verdict = run_nemesis(
        cluster,
        "leader frozen, resumed cut from ZooKeeper",
        freeze_the_leader_cut_from_zookeeper,
        then=resume_it_once_replaced,
        heal=resume,
    )
    assert_sound(verdict)
