"""The sans-IO parts of partition reassignment: plan generation, checks, decommission
plans, the controller's next step, the follower throttle and the leader's replica list."""

from __future__ import annotations

from collections import Counter

import pytest

from broker.common.errors import ReassignmentError
from broker.coordination.partition_state import PartitionState
from broker.coordination.reassignment import (
    check_plan,
    check_throttle,
    decode_job,
    decommission,
    encode_job,
    generate,
    next_step,
    plan_from_json,
    plan_to_json,
)
from broker.replication.isr import LeaderTracker
from broker.replication.manager import reassign_throttle
from broker.replication.throttle import MIN_FETCH_BYTES, Throttle


def _two_broker_topic(partitions: int = 8) -> dict:
    return {("t", p): ([1, 2] if p % 2 == 0 else [2, 1]) for p in range(partitions)}


def test_grow_two_to_four_brokers_balances_replicas_and_leaders():
    current = _two_broker_topic(8)
    plan = generate(current, {1: "", 2: "", 3: "", 4: ""})
    held = Counter(b for r in plan.values() for b in r)
    leads = Counter(r[0] for r in plan.values())
    assert held == {1: 4, 2: 4, 3: 4, 4: 4}
    assert leads == {1: 2, 2: 2, 3: 2, 4: 2}
    assert all(len(set(r)) == 2 for r in plan.values())
    # moving as little as possible: half of the 16 replicas must move, no more
    moved = sum(len(set(r) - set(current[k])) for k, r in plan.items())
    assert moved == 8


def test_a_balanced_topic_stays_put():
    current = {("t", p): [1 + p % 3, 1 + (p + 1) % 3] for p in range(6)}
    assert generate(current, {1: "", 2: "", 3: ""}) == current


def test_generate_is_rack_aware():
    current = {("t", p): [1] for p in range(4)}
    racks = {1: "a", 2: "a", 3: "b", 4: "b"}
    plan = generate(current, racks, replication_factor=2)
    for reps in plan.values():
        assert {racks[b] for b in reps} == {"a", "b"}, reps
    assert Counter(r[0] for r in plan.values()) == {1: 1, 2: 1, 3: 1, 4: 1}


def test_generate_changes_the_replication_factor():
    plan = generate(_two_broker_topic(4), {1: "", 2: "", 3: ""}, replication_factor=3)
    assert all(sorted(r) == [1, 2, 3] for r in plan.values())
    plan = generate(_two_broker_topic(4), {1: "", 2: ""}, replication_factor=1)
    assert all(len(r) == 1 for r in plan.values())
    assert Counter(r[0] for r in plan.values()) == {1: 2, 2: 2}


def test_generate_refuses_a_factor_above_the_broker_count():
    with pytest.raises(ReassignmentError, match="replication factor 3 .* needs 3 brokers"):
        generate(_two_broker_topic(2), {1: "", 2: ""}, replication_factor=3)


def test_plan_json_round_trip_and_bad_files():
    plan = generate(_two_broker_topic(4), {1: "", 2: "", 3: ""})
    assert plan_from_json(plan_to_json(plan)) == plan
    for text in ("", "[]", '{"partitions": []}', '{"partitions": [{"topic": "t"}]}'):
        with pytest.raises(ReassignmentError):
            plan_from_json(text)


def test_check_plan_refuses_unknown_brokers_partitions_and_topics():
    assignments = {"t": {0: [1, 2], 1: [2, 1]}}
    check_plan({("t", 0): [2, 3]}, assignments, [1, 2, 3])
    with pytest.raises(ReassignmentError, match=r"broker\(s\) \[9\]"):
        check_plan({("t", 0): [1, 9]}, assignments, [1, 2, 3])
    with pytest.raises(ReassignmentError, match="partition t-5"):
        check_plan({("t", 5): [1, 2]}, assignments, [1, 2, 3])
    with pytest.raises(ReassignmentError, match="topic 'u'"):
        check_plan({("u", 0): [1]}, assignments, [1, 2, 3])
    with pytest.raises(ReassignmentError, match="twice"):
        check_plan({("t", 0): [1, 1]}, assignments, [1, 2, 3])
    with pytest.raises(ReassignmentError, match="only 2 brokers"):
        check_plan({("t", 0): [1, 2, 3]}, assignments, [1, 2])


def test_throttle_must_be_positive():
    assert check_throttle(1) == 1
    for bad in (0, -5):
        with pytest.raises(ReassignmentError, match="positive"):
            check_throttle(bad)


def test_decommission_moves_every_replica_off_the_broker():
    current = {("t", p): [1 + p % 3, 1 + (p + 1) % 3] for p in range(6)}
    states = {k: PartitionState(r[0], 0, tuple(r)) for k, r in current.items()}
    plan = decommission(3, current, states, {1: "", 2: "", 3: "", 4: ""})
    assert set(plan) == {k for k, r in current.items() if 3 in r}
    assert all(3 not in r and len(set(r)) == 2 for r in plan.values())
    assert all(4 in r for r in plan.values())  # the empty broker takes them


def test_decommission_refuses_what_would_leave_a_partition_short():
    current = {("t", 0): [1, 2]}
    states = {("t", 0): PartitionState(1, 0, (1, 2))}
    with pytest.raises(ReassignmentError, match="only 1 other brokers"):
        decommission(2, current, states, {1: "", 2: ""})
    with pytest.raises(ReassignmentError, match="only broker of the cluster"):
        decommission(1, {("t", 0): [1]}, {}, {1: ""})
    lonely = {("t", 0): PartitionState(2, 3, (2,))}
    with pytest.raises(ReassignmentError, match="only in-sync replica"):
        decommission(2, current, lonely, {1: "", 2: "", 3: ""})


def test_next_step_walks_widen_wait_lead_narrow():
    live = {1: 11, 2: 12, 3: 13, 4: 14}
    step = next_step([1, 2], [3, 4], PartitionState(1, 5, (1, 2), 11), live)
    assert step.kind == "widen" and step.replicas == (1, 2, 3, 4)
    assert next_step([1, 2, 3, 4], [3, 4], PartitionState(1, 5, (1, 2, 3), 11), live).kind == "wait"
    step = next_step([1, 2, 3, 4], [3, 4], PartitionState(1, 5, (1, 2, 3, 4), 11), live)
    assert step.kind == "lead" and step.state is not None
    assert (step.state.leader, step.state.leader_epoch, step.state.leader_session) == (3, 6, 13)
    step = next_step([1, 2, 3, 4], [3, 4], PartitionState(3, 6, (1, 2, 3, 4), 13), live)
    assert step.kind == "narrow" and step.replicas == (3, 4)
    assert step.state == PartitionState(3, 6, (3, 4), 13)
    assert next_step([3, 4], [3, 4], None, live).kind == "done"


def test_next_step_waits_for_a_leader_and_keeps_a_staying_one():
    live = {1: 11, 2: 12, 3: 13}
    assert next_step([1, 2, 3], [2, 3], PartitionState(-1, 5, (1, 2, 3)), live).kind == "wait"
    # leader 2 stays a replica but the plan prefers 3: move it, then narrow
    step = next_step([1, 2, 3], [3, 2], PartitionState(2, 1, (1, 2, 3), 12), live)
    assert step.kind == "lead" and step.state is not None and step.state.leader == 3
    # the preferred replica is down: the staying leader keeps leading
    step = next_step([1, 2, 3], [3, 2], PartitionState(2, 1, (1, 2, 3), 12), {1: 11, 2: 12})
    assert step.kind == "narrow" and step.state is not None and step.state.leader == 2


def test_cancel_is_the_same_walk_back():
    live = {1: 11, 2: 12, 3: 13}
    # half way: widened to [1, 2, 3], 3 leads; going back to [1, 2]
    step = next_step([1, 2, 3], [1, 2], PartitionState(3, 7, (1, 2, 3), 13), live)
    assert step.kind == "lead" and step.state is not None and step.state.leader == 1
    step = next_step([1, 2, 3], [1, 2], PartitionState(1, 8, (1, 2, 3), 11), live)
    assert step.kind == "narrow" and step.replicas == (1, 2)


def test_job_round_trip():
    raw = encode_job({("t", 0): [3, 4]}, {("t", 0): [1, 2]}, 1000)
    job = decode_job(raw)
    assert job is not None
    assert job.targets == {("t", 0): [3, 4]} and job.original == {("t", 0): [1, 2]}
    assert job.throttle == 1000 and not job.cancelled
    assert decode_job(b"{}") is None and decode_job(None) is None


def test_throttle_bucket_holds_the_rate():
    throttle, rate = Throttle(), 100_000.0
    now, fetched = 0.0, 0
    throttle.allowance(rate, now, 1 << 20)
    while now < 10.0:
        ask = throttle.allowance(rate, now, 1 << 20)
        if ask:
            throttle.spend(ask)
            fetched += ask
        else:
            now += throttle.delay(rate)
            continue
        now += 0.001
    assert fetched / 10.0 <= rate * 1.1
    assert fetched / 10.0 >= rate * 0.8
    assert Throttle().allowance(rate, 0.0, 10) == 0  # nothing saved up yet
    t = Throttle()
    t.allowance(rate, 0.0, 1 << 20)
    assert t.allowance(rate, 1.0, 1 << 20) == MIN_FETCH_BYTES  # burst capped at 0.2 s


def test_reassign_throttle_reads_the_topic_setting():
    config = {"reassign_throttle": {"bytes_per_s": 500, "adding": {"0": [3], "1": [4]}}}
    assert reassign_throttle(config, 0, 3) == 500
    assert reassign_throttle(config, 0, 4) == 0
    assert reassign_throttle({}, 0, 3) == 0
    assert reassign_throttle({"reassign_throttle": "junk"}, 0, 3) == 0


def test_leader_tracker_follows_replica_changes():
    tracker = LeaderTracker(1, [1, 2], (1, 2), 100, 0.0)
    tracker.set_replicas([1, 2, 3], 1.0)
    assert tracker.followers[3].leo == 0
    assert 3 not in tracker.ack_set()
    tracker.record_fetch(2, 100, 100, 1.5)
    tracker.record_fetch(3, 100, 100, 2.0)  # caught up: joins
    assert 3 in tracker.ack_set()
    assert tracker.proposed_isr(2.0, 10.0) == (1, 2, 3)
    tracker.set_replicas([1, 3], 3.0)
    assert 2 not in tracker.followers
    tracker.adopt((1, 3), 5)
    assert not tracker.record_fetch(2, 200, 200, 4.0)  # a removed follower is ignored
    assert tracker.proposed_isr(4.0, 10.0) is None
