"""The mirror rides out the WAN cut between the live and the analysis datacenter (issue 37).

Two datacenters on the test network (tests/support/network.py): the live cluster, its
ZooKeeper, the mirror and the producer on switch ``dc1``; the analysis cluster and its
ZooKeeper on ``dc2``; a router between them. The WAN link is cut (the router's port on
``dc2`` down: silence, not refusals) and the analysis broker stopped while the live
side keeps taking messages and a topic appears there that the analysis side has never
seen (the agents' ``_audit``, as the issue saw it). The WAN comes back first, so the
mirror finds the analysis ZooKeeper with no broker registered (the error the mirror
once exited on), then the broker. The mirror must not exit; once the target is back it
resumes within seconds and catches up, every message in its partition, in order, none
lost.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from tests.mirror.conftest import create, ends, mirrored, produce, values_by_partition, wait_for
from tests.support.network import TestNetwork

pytestmark = [pytest.mark.integration, pytest.mark.slow]

OUTAGE_S = 12.0
"""How long the WAN is cut: past the 6 s ZooKeeper sessions (the mirror's session with
the analysis ZooKeeper expires), as short as that allows."""
ROUNDS = 6
ROUND = 1_000
"""Messages per topic per production round during the cut."""


@pytest.mark.timeout(180)
@pytest.mark.parametrize("mode", ["preserve"])  # the default; the frozen target's test runs both
def test_the_mirror_rides_out_a_wan_cut_while_a_new_topic_appears_and_loses_nothing(
    test_network: TestNetwork, mirrors, mode: str
) -> None:
    net = test_network
    net.switch("dc1")
    net.switch("dc2")
    live_zk, live_broker = net.host("livezk", "dc1"), net.host("live1", "dc1")
    mirror_host, agent = net.host("mirror", "dc1"), net.host("agent", "dc1")
    ana_zk, ana_broker = net.host("anazk", "dc2"), net.host("ana1", "dc2")
    net.router("wan", "dc1", "dc2")
    source = SimpleNamespace(zk_connect=f"{net.zookeeper(live_zk).hosts}/live")
    target = SimpleNamespace(zk_connect=f"{net.zookeeper(ana_zk).hosts}/analysis")
    net.broker(live_broker, 1, source.zk_connect)
    analysis = net.broker(ana_broker, 1, target.zk_connect)

    with agent.inside():
        create(source.zk_connect, "events", 2)
        produce(source.zk_connect, "events", 2_000, 2, tag="before")
    with mirror_host.inside():  # the mirror process on the live side's host
        mirror = mirrors("m", source, target, mode=mode, request_timeout_s=2.0, audit_topic="")
    sent = {"events": 2_000, "_audit": 0}
    with agent.inside():
        wait_for(lambda: mirrored(source.zk_connect, target.zk_connect, "events", exact=True), 60, "the first copy")

        net.cut("wan", "dc2")
        cut_at = time.monotonic()
        analysis.stop()  # the analysis datacenter's outage: its broker down too (deregistered)
        create(source.zk_connect, "_audit", 2)  # new on the live side, unknown on the other
        for i in range(ROUNDS):
            for topic in ("events", "_audit"):
                produce(source.zk_connect, topic, ROUND, 2, tag=f"during{i}", batch=250)
                sent[topic] += ROUND
            time.sleep(max(0.0, min(1.0, cut_at + OUTAGE_S - time.monotonic())))
        time.sleep(max(0.0, cut_at + OUTAGE_S - time.monotonic()))
        assert mirror.alive(), mirror.log_tail()
        net.heal()  # the WAN back, the analysis broker not yet: "no broker is registered"
        wait_for(
            lambda: "no broker is registered" in mirror.status().get("target", {}).get("last_error", ""),
            20,
            "the mirror to find the analysis ZooKeeper without a broker",
        )
        assert mirror.alive(), mirror.log_tail()
        analysis.start()
        back_at = time.monotonic()

        wait_for(lambda: sum(ends(target.zk_connect, "_audit").values()) > 0, 30, "the new topic on the target")
        resumed_s = time.monotonic() - back_at
        for topic in sent:
            wait_for(
                lambda t=topic: mirrored(source.zk_connect, target.zk_connect, t, exact=mode == "preserve"),
                60,
                f"{topic} to catch up",
            )
        caught_up_s = time.monotonic() - back_at
        print(f"{mode}: resumed {resumed_s:.1f}s, caught up {caught_up_s:.1f}s after the analysis broker's return")
        for topic, n in sent.items():
            source_values = values_by_partition(source.zk_connect, topic)
            target_values = values_by_partition(target.zk_connect, topic)
            if mode == "produce":  # at least once: a retried copy may be appended twice, in order
                target_values = {p: list(dict.fromkeys(v)) for p, v in target_values.items()}
            print(
                f"{topic}: sent {n}, on the live side {sum(map(len, source_values.values()))}, mirrored "
                f"{sum(map(len, target_values.values()))}"
            )
            assert sum(len(v) for v in source_values.values()) == n
            assert target_values == source_values  # the same values, in order, in each partition
    assert resumed_s < 10.0, f"resumed {resumed_s:.1f}s after the target's return (issue 37's target: 10 s)"
    assert mirror.alive(), mirror.log_tail()
    log = mirror.log_file.read_text()
    assert "cannot prepare target topic" not in log and "Traceback" not in log, log
    assert "MIRROR TARGET UNAVAILABLE" in log and "MIRROR TARGET BACK" in log, log
    assert mirror.terminate() == 0
