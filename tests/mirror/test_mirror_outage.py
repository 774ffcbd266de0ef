"""The mirror rides out an outage of the target cluster (issue 37), with real processes.

As the issue tried it: the analysis cluster's only broker is frozen (SIGSTOP) long enough
for its ZooKeeper session to expire ("no broker is registered"), while the source keeps
taking messages for an existing topic and a topic appears that the target has never seen
(the agents' ``_audit``). The mirror must not exit; once the broker runs again it must
resume within seconds and catch up with nothing lost, in order per partition.
"""

from __future__ import annotations

import threading
import time

import pytest

from broker.client import Admin
from tests.mirror.conftest import (
    create,
    ends,
    mirrored,
    produce,
    values_by_partition,
    wait_for,
)
from tests.support.metrics import samples, scrape, value
from tests.support.ports import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

OUTAGE_S = 14.0
"""How long the target's broker is frozen: past its 6 s ZooKeeper session (the test
brokers'), so it is unregistered for most of it."""
ROUND = 1_000
"""Messages per topic per production round during the outage."""
MAX_ROUNDS = 40


def _registered(zk: str) -> bool:
    with Admin(zk=zk) as admin:
        return bool(admin.cluster.registrations())


def _unavailable_s(port: int) -> float | None:
    """The mirror's ``target_unavailable_seconds`` (None: not scraped)."""
    try:
        text = scrape(f"http://127.0.0.1:{port}/metrics")
    except OSError:
        return None
    return value(samples(text), "logferry_mirror_target_unavailable_seconds")


@pytest.mark.timeout(240)
@pytest.mark.parametrize("mode", ["preserve", "produce"])
def test_a_frozen_target_while_a_new_topic_appears_loses_nothing_and_the_mirror_resumes(
    broker_cluster, zookeeper, mirrors, mode: str
) -> None:
    source = broker_cluster(1, zk=zookeeper.new_chroot())
    target = broker_cluster(1, zk=zookeeper.new_chroot())
    create(source.zk_connect, "events", 2)
    produce(source.zk_connect, "events", 5_000, 2, tag="before")
    port = free_port()
    mirror = mirrors(
        "m",
        source,
        target,
        mode=mode,
        request_timeout_s=2.0,  # a frozen target's requests give up soon
        audit_topic="",
        metrics={"port": port},
    )
    wait_for(lambda: mirrored(source.zk_connect, target.zk_connect, "events", exact=True), 60, "the first copy")

    sent = {"events": 5_000, "_audit": 0}
    stop = threading.Event()

    def keep_producing() -> None:  # both topics, in rounds, until the target is back
        for i in range(MAX_ROUNDS):
            if stop.is_set():
                return
            for topic in ("events", "_audit"):
                produce(source.zk_connect, topic, ROUND, 2, tag=f"during{i}", batch=250)
                sent[topic] += ROUND
            stop.wait(0.3)

    target.brokers[0].pause()  # SIGSTOP: connections stay up, nothing is answered
    frozen_at = time.monotonic()
    producer = threading.Thread(target=keep_producing, name="outage-producer")
    try:
        create(source.zk_connect, "_audit", 2)  # new on the source, unknown to the target
        producer.start()
        wait_for(lambda: not _registered(target.zk_connect), OUTAGE_S, "the frozen broker's registration to expire")
        wait_for(lambda: (_unavailable_s(port) or 0) > 0, OUTAGE_S, "the mirror to report the outage")
        assert mirror.alive(), mirror.log_tail()
        time.sleep(max(0.0, frozen_at + OUTAGE_S - time.monotonic()))  # the outage itself
        assert mirror.alive(), mirror.log_tail()
    finally:
        target.brokers[0].resume()
        back_at = time.monotonic()
        stop.set()
        producer.join(60)
    assert not producer.is_alive()

    # resumed: the new topic's first bytes reach the target
    wait_for(lambda: sum(ends(target.zk_connect, "_audit").values()) > 0, 30, "the new topic on the target")
    resumed_s = time.monotonic() - back_at
    wait_for(lambda: _unavailable_s(port) == 0.0, 30, "the mirror to report the target back")
    for topic in ("events", "_audit"):
        wait_for(
            lambda t=topic: mirrored(source.zk_connect, target.zk_connect, t, exact=mode == "preserve"),
            90,
            f"{topic} to catch up",
        )
    caught_up_s = time.monotonic() - back_at
    print(f"{mode}: resumed {resumed_s:.1f}s, caught up {caught_up_s:.1f}s after the target's return")
    assert resumed_s < 15.0, f"resumed {resumed_s:.1f}s after the target's return"  # target: 10 s
    assert mirror.alive(), mirror.log_tail()

    for topic, n in sent.items():
        source_values = values_by_partition(source.zk_connect, topic)
        target_values = values_by_partition(target.zk_connect, topic)
        if mode == "produce":  # at least once: a retried copy may be appended twice, in order
            target_values = {p: list(dict.fromkeys(v)) for p, v in target_values.items()}
        assert sum(len(v) for v in source_values.values()) == n
        assert sum(len(v) for v in target_values.values()) == n  # sent N, received N
        assert target_values == source_values  # the same values, in order, in each partition

    log = mirror.log_file.read_text()
    assert "cannot prepare target topic" not in log and "Traceback" not in log, log
    assert "MIRROR TARGET UNAVAILABLE" in log and "MIRROR TARGET BACK" in log, log
    status = wait_for(
        lambda: (s := mirror.status().get("target", {})).get("unavailable_s") == 0 and s,
        10,
        "the status file to show the target back",
    )
    assert status["outages"] >= 1 and status["last_outage_s"] > 0
    assert mirror.terminate() == 0
