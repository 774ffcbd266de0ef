"""Nemesis: the in-sync replicas killed, a lagging replica left; clean and unclean election.

What ``unclean_leader_election = true`` costs, measured (issue 37). On the nemeses'
cluster (tests/support/nemesis.py): broker 3 is cut from brokers 1 and 2 (it still
reaches ZooKeeper and the client), so it drops out of the ISR of the partitions they
lead, which go on acknowledging acks=all writes with an ISR of two. Once every such
partition has acknowledged about 10 KB more that broker 3 does not hold, brokers 1 and 2
are killed (kill -9). When their sessions expire, the only live replica of those
partitions is broker 3, out of sync:

* by default (``unclean_leader_election = false``) the controller leaves them without a
  leader until an in-sync replica returns; at the heal brokers 1 and 2 start again, lead
  again, broker 3 catches up: nothing acknowledged is lost (the checker asserts it);
* with ``unclean_leader_election = true`` broker 3 is elected leader with an ISR of
  itself; brokers 1 and 2 return as its followers and cut what it does not hold: every
  message acknowledged after broker 3 fell behind is lost. The checker counts them (the
  test asserts that some were lost, so the scenario keeps proving the point) and the
  figure goes to docs/guarantees.md.
"""

from __future__ import annotations

import pytest

from broker.client import SimpleConsumer
from broker.coordination.partition_state import PartitionState
from tests.support.nemesis import MARKS, PARTITIONS, TOPIC, assert_sound, run_nemesis, three_brokers
from tests.support.network import TestNetwork
from tests.support.waiting import wait_until

pytestmark = MARKS

BEHIND_BYTES = 10_000
"""How much more each partition led by broker 1 or 2 acknowledges without broker 3."""


@pytest.mark.timeout(300)
@pytest.mark.parametrize("unclean", [False, True], ids=["clean", "unclean"])
def test_an_unclean_election_loses_what_only_the_killed_isr_had(test_network: TestNetwork, unclean: bool) -> None:
    cluster = three_brokers(test_network, broker={"unclean_leader_election": unclean})

    def cut_broker_3_from_its_peers() -> str:
        test_network.partition(["b3"], ["b1", "b2"])
        return "broker 3 cut from brokers 1 and 2 (it still reaches ZooKeeper and the client)"

    def kill_the_isr() -> str:
        def shrunk(states: dict[int, PartitionState]) -> bool:
            return all(3 not in s.isr for s in states.values() if s.leader != 3)

        led = [p for p, s in cluster.wait_for_states(shrunk, "broker 3 out of the ISRs").items() if s.leader != 3]
        with SimpleConsumer(zk=cluster.zk_connect) as consumer:
            start = {p: consumer.offsets(TOPIC, p).end for p in led}
            wait_until(
                lambda: all(consumer.offsets(TOPIC, p).end >= start[p] + BEHIND_BYTES for p in led),
                30,
                f"{BEHIND_BYTES} more bytes acknowledged on partitions {led} without broker 3",
                interval=0.2,
            )
        for b in (1, 2):
            cluster.kill(b)

        def decided(states: dict[int, PartitionState]) -> bool:
            return all(s.leader in (3, -1) for s in states.values())

        states = cluster.wait_for_states(decided, "the controller's decision once brokers 1 and 2 are gone")
        leaders = {p: states[p].leader for p in range(PARTITIONS)}
        return f"brokers 1 and 2 killed after partitions {led} went on without broker 3; leaders now {leaders}"

    def start_brokers_1_and_2() -> str:
        for b in (1, 2):
            cluster.by_id[b].start()
        return "brokers 1 and 2 started again"

    name = f"ISR killed, lagging replica left ({'unclean' if unclean else 'clean'} election)"
    verdict = run_nemesis(cluster, name, cut_broker_3_from_its_peers, then=kill_the_isr, heal=start_brokers_1_and_2)
    if unclean:
        assert verdict.lost > 0, f"the unclean election lost nothing: {verdict.summary()}"
        assert not verdict.divergent, "the replicas differ after the returning brokers followed broker 3"
    else:
        assert_sound(verdict)
