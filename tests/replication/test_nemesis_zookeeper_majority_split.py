"""Nemesis: a three-node ZooKeeper ensemble split, every broker with the minority (issue 37).

The nemeses' cluster (tests/support/nemesis.py) with an ensemble of three ZooKeeper
servers on three hosts. One member that does not lead the ensemble, and all three
brokers, are cut from the other two members, both ways, for the hold (10 s); the client
still reaches every host. The minority member loses its quorum and stops serving, so
the brokers reach no ZooKeeper that serves, while the majority goes on serving (the
client's metadata lookups included) and expires every broker's session after 6 s: the
brokers' view of ZooKeeper ends, ZooKeeper's view of the brokers ends too. Leaders keep
taking acks=all writes while every in-sync replica is up (the ISR cannot change without
ZooKeeper); after the heal every broker registers in a new session and the controller
elects again. The checker counts what must hold (nothing acknowledged lost, no
duplicate, order, identical replicas); the pauses are reported (docs/guarantees.md).
"""

from __future__ import annotations

import pytest

from tests.support.nemesis import MARKS, SETTINGS, assert_sound, run_nemesis, three_brokers, timing
from tests.support.network import TestNetwork

pytestmark = MARKS


@pytest.mark.timeout(300)
def test_every_broker_with_a_zookeeper_minority_loses_no_acknowledged_message(test_network: TestNetwork) -> None:
    cluster = three_brokers(test_network, ensemble=3)
    members = {f"zk{i}": server for i, server in enumerate(cluster.zookeepers, 1)}
    brokers = ["b1", "b2", "b3"]

    def split_the_brokers_off_with_a_minority() -> str:
        modes = {}
        for name, server in members.items():
            with test_network.hosts[name].inside():
                modes[name] = server.srvr().get("Mode", "?")
        minority = next(name for name, mode in modes.items() if mode == "follower")
        majority = [n for n in members if n != minority]
        test_network.partition([minority, *brokers], majority)
        return f"ZooKeeper ensemble {modes}: {minority} and brokers {brokers} cut from {majority}"

    name = "ZooKeeper majority split"
    verdict = run_nemesis(cluster, name, split_the_brokers_off_with_a_minority)
    assert_sound(verdict)
    if timing(name).hold_s > SETTINGS["zk_session_timeout_s"] + 2:  # the majority expired every session
        kept = [b.name for b in test_network.brokers if "ZooKeeper session lost" not in b.log_text()]
        assert not kept, f"the sessions of {kept} did not expire: the brokers reached the majority"
