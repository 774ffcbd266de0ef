"""Consumer groups with members in separate processes, real brokers and ZooKeeper.

Each test produces numbered messages (value ``v`` to partition ``v % P``), runs members
of ``tests/groups/member.py`` and checks what they recorded: every message consumed,
duplicates only where a crash allows them, and ownership intervals that never overlap.
The tests that leave the broker and ZooKeeper running share the module's broker
(``module_cluster``), each with its own topic and groups.
"""

from __future__ import annotations

import threading
import time

import pytest

from tests.groups.conftest import (
    all_records,
    assert_consumed_all,
    assert_no_overlap,
    consumed_values,
    create_topic,
    produce,
    wait_for,
)

pytestmark = pytest.mark.integration


def _background(target, *args) -> threading.Thread:
    errors: list[BaseException] = []

    def run():
        try:
            target(*args)
        except BaseException as exc:  # surfaced by _join
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.errors = errors  # type: ignore[attr-defined]
    thread.start()
    return thread


def _join(thread: threading.Thread, timeout: float = 120) -> None:
    thread.join(timeout)
    assert not thread.is_alive(), "producer thread did not finish"
    assert not thread.errors, thread.errors  # type: ignore[attr-defined]


@pytest.mark.slow
def test_three_members_twelve_partitions_300k_messages_exactly_once(broker_cluster, group_members):
    cluster = broker_cluster(2)
    zk = cluster.zk_connect
    create_topic(zk, "events", 12)
    total = 300_000
    produce(zk, "events", range(0, 100_000), 12)
    producer = _background(produce, zk, "events", range(100_000, total), 12, 500, 0.05)
    a = group_members("A", zk=zk, group="g", topics=["events"], api="iter")
    wait_for(lambda: len(a.records()) > 10_000, 60, "A to consume")
    b = group_members("B", zk=zk, group="g", topics=["events"], api="poll")
    wait_for(lambda: b.records(), 60, "B to consume")
    c = group_members("C", zk=zk, group="g", topics=["events"], api="streams")
    members = [a, b, c]
    _join(producer)
    wait_for(lambda: len(consumed_values(members)) >= total, 120, "all messages consumed", interval=0.5)
    owned = [m.owned() for m in members]
    assert all(len(o) == 4 for o in owned), owned  # 12 partitions over 3 members
    for m in members:
        m.stop()
    records = all_records(members)
    assert_consumed_all(records, range(total))
    assert_no_overlap(members)
    # Order within a partition: each member saw each of its partitions in offset order.
    for m in members:
        last: dict[int, tuple[int, int]] = {}
        for r in m.records():
            assert (r.offset, r.index) > last.get(r.partition, (-1, -1)), r
            last[r.partition] = (r.offset, r.index)
    assert all(m.closed_metrics()["rebalances"] >= 1 for m in members)


@pytest.mark.slow
def test_kill_9_moves_partitions_within_session_timeout(module_cluster, unique_name, group_members):
    zk = module_cluster.zk_connect
    k9, group = unique_name("k9"), unique_name("g")
    create_topic(zk, k9, 6)
    total = 60_000
    session = 3.0
    members = [
        group_members(n, zk=zk, group=group, topics=[k9], session_timeout=session, auto_commit_ms=300)
        for n in ("A", "B", "C")
    ]
    a, b, c = members
    wait_for(lambda: all(len(m.owned()) == 2 for m in members), 60, "a balanced group")
    producer = _background(produce, zk, k9, range(total), 6, 100, 0.1)  # ~6,000 msg/s
    wait_for(lambda: len(b.records()) > 3000, 60, "B to consume")
    time.sleep(1.0)  # a few auto-commits of B's
    victims = b.owned()
    killed_at = b.kill()
    wait_for(lambda: len(a.owned()) + len(c.owned()) == 6, session + 10, "B's partitions to move")
    # The wait above bounds the move by the session timeout plus slack; how long it
    # takes is a figure of benchmarks/group_consumer.py, not an assertion here.
    assert any(
        e[0] == "assign" and (e[1], int(e[2])) in victims and float(e[3]) > killed_at
        for m in (a, c)
        for e in m.events()
    ), "no survivor was assigned B's partitions"
    _join(producer)
    wait_for(lambda: len(consumed_values(members)) >= total, 60, "all messages consumed", interval=0.5)
    a.stop()
    c.stop()
    records = all_records(members)
    duplicates = assert_consumed_all(records, range(total), allow_duplicates=True)
    # Duplicates only in the killed member's uncommitted tail: for each of its partitions,
    # what it consumed and someone consumed again is a suffix of what it consumed.
    by_b = [r for r in b.records()]
    for _t, p in victims:
        mine = [r.value for r in by_b if r.partition == p]
        again = [v in duplicates for v in mine]
        if True in again:
            first = again.index(True)
            assert all(again[first:]), f"partition {p}: duplicates are not a tail of B's consumption"
    dup_values = set(duplicates)
    assert dup_values <= {r.value for r in by_b}, "a duplicate that B never consumed"
    assert len(dup_values) < len(by_b), "B's commits were not used: everything it read came again"
    assert_no_overlap(members)


@pytest.mark.slow
def test_member_joins_and_one_leaves_cleanly_nothing_lost_or_repeated(module_cluster, unique_name, group_members):
    zk = module_cluster.zk_connect
    jl, group = unique_name("jl"), unique_name("g")
    create_topic(zk, jl, 8)
    total = 80_000
    producer = _background(produce, zk, jl, range(total), 8, 200, 0.05)
    a = group_members("A", zk=zk, group=group, topics=[jl])
    b = group_members("B", zk=zk, group=group, topics=[jl])
    wait_for(lambda: len(a.owned()) == 4 and len(b.owned()) == 4, 60, "A and B to share")
    wait_for(lambda: len(a.records()) > 2000, 60, "consumption")
    c = group_members("C", zk=zk, group=group, topics=[jl])
    wait_for(lambda: len(c.owned()) >= 2 and len(a.owned()) + len(b.owned()) + len(c.owned()) == 8, 30, "C to join")
    a.stop()  # a clean leave mid-stream
    wait_for(lambda: len(b.owned()) + len(c.owned()) == 8, 30, "A's partitions to move")
    _join(producer)
    members = [a, b, c]
    wait_for(lambda: len(consumed_values(members)) >= total, 60, "all messages consumed", interval=0.5)
    b.stop()
    c.stop()
    assert_consumed_all(all_records(members), range(total))
    assert_no_overlap(members)


def test_two_groups_each_receive_everything(module_cluster, unique_name, group_members):
    zk = module_cluster.zk_connect
    shared = unique_name("shared")
    create_topic(zk, shared, 4)
    total = 20_000
    produce(zk, shared, range(total), 4)
    g1 = [group_members(n, zk=zk, group=unique_name("one"), topics=[shared]) for n in ("A", "B")]
    g2 = [group_members("C", zk=zk, group=unique_name("two"), topics=[shared], api="poll")]
    wait_for(
        lambda: len(consumed_values(g1)) >= total and len(consumed_values(g2)) >= total,
        60,
        "both groups to consume everything",
        interval=0.5,
    )
    for m in g1 + g2:
        m.stop()
    assert_consumed_all(all_records(g1), range(total))
    assert_consumed_all(all_records(g2), range(total))


@pytest.mark.slow
def test_broker_restart_during_consumption(broker_cluster, group_members):
    cluster = broker_cluster(2)
    zk = cluster.zk_connect
    create_topic(zk, "br", 8)
    produce(zk, "br", range(0, 40_000), 8)
    members = [group_members(n, zk=zk, group="g", topics=["br"], max_bytes=16 * 1024) for n in ("A", "B")]
    wait_for(lambda: len(consumed_values(members)) > 5_000, 60, "consumption")
    cluster.brokers[0].restart()
    produce(zk, "br", range(40_000, 80_000), 8)
    wait_for(lambda: len(consumed_values(members)) >= 80_000, 90, "all messages consumed", interval=0.5)
    for m in members:
        m.stop()
    assert_consumed_all(all_records(members), range(80_000))
    assert_no_overlap(members)


@pytest.mark.slow
def test_zookeeper_down_for_10s_during_consumption(broker_cluster, group_members, zookeeper):
    cluster = broker_cluster(1)
    zk = cluster.zk_connect
    create_topic(zk, "zkd", 4)
    produce(zk, "zkd", range(0, 20_000), 4)
    members = [group_members(n, zk=zk, group="g", topics=["zkd"], session_timeout=6.0) for n in ("A", "B")]
    wait_for(lambda: all(len(m.owned()) == 2 for m in members), 60, "a balanced group")
    wait_for(lambda: len(consumed_values(members)) >= 20_000, 60, "first half consumed", interval=0.5)
    zookeeper.stop()
    try:
        # The brokers keep serving without ZooKeeper; members pause fetching meanwhile.
        produce_thread = _background(produce, cluster.bootstrap, "zkd", range(20_000, 40_000), 4)
        time.sleep(10)
    finally:
        zookeeper.start()
    _join(produce_thread)
    wait_for(lambda: len(consumed_values(members)) >= 40_000, 90, "all messages consumed", interval=0.5)
    for m in members:
        m.stop()
    lost_sessions = sum(m.closed_metrics().get("sessions_lost", 0) for m in members)
    duplicates = assert_consumed_all(all_records(members), range(40_000), allow_duplicates=True)
    if not lost_sessions:
        assert not duplicates, "sessions survived, yet messages were repeated"


def test_expired_session_rejoins_and_loses_nothing(module_cluster, unique_name, group_members):
    zk = module_cluster.zk_connect
    exp, group = unique_name("exp"), unique_name("g")
    create_topic(zk, exp, 4)
    total = 40_000
    producer = _background(produce, zk, exp, range(total), 4, 200, 0.05)
    a, b = members = [group_members(n, zk=zk, group=group, topics=[exp]) for n in ("A", "B")]
    wait_for(lambda: len(a.owned()) == 2 and len(b.owned()) == 2, 60, "a balanced group")
    wait_for(lambda: len(a.records()) > 1000, 60, "A to consume")
    a.expire_session()
    wait_for(lambda: sum(1 for e in a.events() if e[0] == "revoke") >= 2, 30, "A to lose its session")
    wait_for(lambda: len(a.owned()) == 2 and len(b.owned()) == 2, 30, "A to rejoin")
    _join(producer)
    wait_for(lambda: len(consumed_values(members)) >= total, 60, "all messages consumed", interval=0.5)
    for m in members:
        m.stop()
    assert a.closed_metrics()["sessions_lost"] >= 1
    duplicates = assert_consumed_all(all_records(members), range(total), allow_duplicates=True)
    assert set(duplicates) <= {r.value for r in a.records()}, "duplicates outside A's uncommitted tail"
