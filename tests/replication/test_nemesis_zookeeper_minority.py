"""Nemesis: a three-node ZooKeeper ensemble split, its leader in the minority (issue 37).

The nemeses' cluster (tests/support/nemesis.py) with an ensemble of three ZooKeeper
servers on three hosts instead of one. The member leading the ensemble is cut from the
other two, both ways, for its hold (10 s); brokers and the client still reach every member.
The minority member loses its quorum and stops serving (its clients are dropped and
reconnect to the majority's members), the majority elects a leader of its own, and the
sessions live on there: the brokers' sessions must not expire, no partition should
change leader, and the checker counts what must hold (nothing acknowledged lost, no
duplicate, order, identical replicas); the pauses are reported (docs/guarantees.md).

A run lasts about 45 s, in ``make test`` beside the other nemeses; ``scripts/nemesis.sh``
draws when each fault starts and how long it holds (docs/testing.md).
"""

from __future__ import annotations

import pytest

from tests.support.nemesis import MARKS, assert_sound, run_nemesis, three_brokers
from tests.support.network import TestNetwork

pytestmark = MARKS


@pytest.mark.timeout(300)
def test_a_zookeeper_minority_split_loses_no_acknowledged_message(test_network: TestNetwork) -> None:
    cluster = three_brokers(test_network, ensemble=3)
    members = {f"zk{i}": server for i, server in enumerate(cluster.zookeepers, 1)}

    def split_the_ensembles_leader_off() -> str:
        modes = {}
        for name, server in members.items():
            with test_network.hosts[name].inside():
                modes[name] = server.srvr().get("Mode", "?")
        leader = next(name for name, mode in modes.items() if mode == "leader")
        test_network.partition([leader], [n for n in members if n != leader])
        return f"ZooKeeper ensemble {modes}: its leader {leader} cut from the other members"

    verdict = run_nemesis(cluster, "ZooKeeper minority split", split_the_ensembles_leader_off)
    assert_sound(verdict)
    expired = [b.name for b in test_network.brokers if "ZooKeeper session lost" in b.log_text()]
    assert not expired, f"sessions expired on {expired} although a quorum served all along"
