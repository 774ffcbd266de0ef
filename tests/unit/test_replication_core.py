"""The sans-IO cores of replication: election, placement, ISR bookkeeping, reconcile."""

from __future__ import annotations

import pytest

from broker.coordination.partition_state import (
    NO_LEADER,
    PartitionState,
    assign_replicas,
    elect,
    initial_state,
)
from broker.replication.isr import LeaderTracker
from broker.replication.reconcile import matching_prefix
from broker.wire import records

LIVE = {1: 101, 2: 102, 3: 103}  # broker id -> session


# -- state and election -----------------------------------------------------------------


def test_state_round_trips_through_its_znode_payload() -> None:
    state = PartitionState(2, 7, (2, 3), 102)
    assert PartitionState.decode(state.encode(), version=4) == PartitionState(2, 7, (2, 3), 102, 4)
    assert PartitionState.decode(b"") is None
    assert PartitionState.decode(b"{not json") is None
    assert PartitionState.decode(b'{"leader": 1}') is None


def test_initial_state_leads_with_the_first_live_replica() -> None:
    assert initial_state([3, 1, 2], LIVE) == PartitionState(3, 0, (3, 1, 2), 103)
    assert initial_state([4, 2], LIVE) == PartitionState(2, 0, (2,), 102)
    assert initial_state([4, 5], LIVE).leader == NO_LEADER


def test_a_live_leader_in_its_session_is_left_alone() -> None:
    assert elect(PartitionState(1, 3, (1, 2, 3), 101), [1, 2, 3], LIVE) is None


def test_a_dead_leader_is_replaced_by_the_first_live_isr_member() -> None:
    live = {2: 102, 3: 103}
    new = elect(PartitionState(1, 3, (1, 3), 101), [1, 2, 3], live)
    # 2 is alive but was not in sync: it may not lead (it could lack acked messages).
    assert new == PartitionState(3, 4, (3,), 103)


def test_a_restarted_leader_counts_as_gone_and_may_be_elected_again() -> None:
    restarted = {1: 999, 2: 102, 3: 103}
    new = elect(PartitionState(1, 3, (1,), 101), [1, 2, 3], restarted)
    assert new == PartitionState(1, 4, (1,), 999)  # same broker, new epoch and session


def test_no_live_isr_member_takes_the_partition_offline_unless_unclean() -> None:
    state = PartitionState(1, 3, (1,), 101)
    offline = elect(state, [1, 2, 3], {2: 102})
    assert offline == PartitionState(NO_LEADER, 4, (1,))  # the last ISR is kept
    assert elect(offline, [1, 2, 3], {2: 102}) is None  # stays offline, no epoch churn
    assert elect(offline, [1, 2, 3], {1: 201, 2: 102}) == PartitionState(1, 5, (1,), 201)
    assert elect(state, [1, 2, 3], {2: 102}, unclean=True) == PartitionState(2, 4, (2,), 102)


def test_dead_followers_leave_the_isr_without_a_new_epoch() -> None:
    new = elect(PartitionState(1, 3, (1, 2, 3), 101, version=9), [1, 2, 3], {1: 101, 3: 103})
    assert new == PartitionState(1, 3, (1, 3), 101)


def test_preferred_election_moves_leadership_back_only_to_an_in_sync_first_replica() -> None:
    state = PartitionState(2, 5, (2, 3, 1), 102)
    assert elect(state, [1, 2, 3], LIVE, preferred=True) == PartitionState(1, 6, (2, 3, 1), 101)
    assert elect(PartitionState(2, 5, (2, 3), 102), [1, 2, 3], LIVE, preferred=True) is None


def test_replicas_are_distinct_spread_and_leaders_rotate() -> None:
    placed = assign_replicas("t", 12, 3, {1: "", 2: "", 3: "", 4: ""})
    assert all(len(set(r)) == 3 for r in placed.values())
    leaders = [r[0] for r in placed.values()]
    assert sorted(leaders.count(b) for b in (1, 2, 3, 4)) == [3, 3, 3, 3]
    assert placed == assign_replicas("t", 12, 3, {4: "", 3: "", 2: "", 1: ""})


def test_replicas_of_a_partition_land_on_different_racks_when_racks_are_declared() -> None:
    racks = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    for replicas in assign_replicas("logs", 24, 3, racks).values():
        assert len({racks[b] for b in replicas}) == 3


def test_placement_refuses_impossible_requests() -> None:
    with pytest.raises(ValueError, match="needs 3 live brokers, only 2"):
        assign_replicas("t", 1, 3, {1: "", 2: ""})
    with pytest.raises(ValueError):
        assign_replicas("t", 0, 1, {1: ""})
    with pytest.raises(ValueError):
        assign_replicas("t", 1, 1, {})


# -- the leader's bookkeeping -----------------------------------------------------------


def test_high_watermark_is_the_smallest_isr_end_capped_by_the_publishable_end() -> None:
    tracker = LeaderTracker(1, [1, 2, 3], (1, 2, 3), high_watermark=100, now=0.0)
    assert tracker.replicated_end(500) == 100  # followers not heard from: at the mark
    tracker.record_fetch(2, 400, 500, now=1.0)
    tracker.record_fetch(3, 300, 500, now=1.0)
    assert tracker.replicated_end(500) == 300
    assert tracker.advance_high_watermark(500, publishable_end=250) and tracker.high_watermark == 250
    assert tracker.advance_high_watermark(500, publishable_end=500) and tracker.high_watermark == 300
    tracker.record_fetch(3, 200, 500, now=2.0)  # a re-fetch from lower never moves it back
    assert not tracker.advance_high_watermark(500, 500) and tracker.high_watermark == 300


def test_a_follower_that_stops_fetching_leaves_the_isr_and_returns_when_caught_up() -> None:
    tracker = LeaderTracker(1, [1, 2, 3], (1, 2, 3), high_watermark=0, now=0.0)
    for t in (0.5, 1.0, 1.5, 2.0):
        tracker.record_fetch(2, 100, 100, now=t)
    assert tracker.proposed_isr(now=2.0, lag=1.0) == (1, 2)  # 3 silent since 0.0
    tracker.adopt((1, 2), version=1)
    tracker.advance_high_watermark(100, 100)
    tracker.record_fetch(3, 50, 100, now=2.5)
    assert tracker.proposed_isr(now=2.5, lag=1.0) is None  # behind the watermark
    tracker.record_fetch(3, 100, 100, now=2.6)
    assert tracker.proposed_isr(now=2.6, lag=1.0) == (1, 2, 3)


def test_a_follower_keeping_pace_with_a_steady_stream_counts_as_caught_up() -> None:
    tracker = LeaderTracker(1, [1, 2], (1, 2), high_watermark=0, now=0.0)
    end = 0
    for step in range(1, 40):
        # Each fetch reaches the leader's end as of the previous fetch, never the
        # current one (a batch always lands in between).
        tracker.record_fetch(2, end, end + 10, now=step * 0.1)
        end += 10
    assert tracker.proposed_isr(now=4.0, lag=0.5) is None


def test_a_follower_that_never_fetched_does_not_rejoin_the_isr() -> None:
    # A new leader starts without a dead broker in its ISR; the dead broker must not
    # come back in just because the leader assumes it holds the watermark.
    tracker = LeaderTracker(2, [1, 2, 3], (2, 3), high_watermark=500, now=10.0)
    tracker.record_fetch(3, 500, 500, now=10.2)
    assert tracker.proposed_isr(now=10.5, lag=1.5) is None
    tracker.record_fetch(1, 500, 500, now=10.6)
    assert tracker.proposed_isr(now=10.7, lag=1.5) == (2, 3, 1)


def test_a_follower_joins_only_holding_every_acknowledged_batch() -> None:
    # The high watermark lags what acks=all confirmed by the leader's unflushed bytes;
    # a follower that only reached the watermark must not join, or its election after
    # the leader's death would lose acknowledged batches.
    tracker = LeaderTracker(1, [1, 2, 3], (1, 2), high_watermark=0, now=0.0)
    tracker.record_fetch(2, 1000, 1000, now=0.1)
    assert tracker.replicated_end(1000) == 1000  # acks=all answered up to 1000
    tracker.advance_high_watermark(1000, publishable_end=400)
    assert tracker.high_watermark == 400
    tracker.record_fetch(3, 500, 1000, now=0.2)  # past the watermark, short of the acks
    assert tracker.proposed_isr(now=0.3, lag=1.0) is None
    tracker.record_fetch(3, 1000, 1000, now=0.4)
    assert tracker.proposed_isr(now=0.5, lag=1.0) == (1, 2, 3)


def test_a_restarted_leader_admits_no_follower_short_of_its_log_end_at_election() -> None:
    # The case of test_kill9_mid_copy_the_move_finishes[controller]: leader 1 is killed
    # -9 while new replica 3 copies, comes back and is elected again. It knows its high
    # watermark only up to its flushed end (67,241), and assumes its in-sync follower 2
    # holds that much until 2 fetches. Replica 3, at 100,844 of 828,364 bytes, was past
    # that assumed end: it joined the ISR, the reassignment made it leader, and the
    # other replicas truncated acknowledged messages to its end.
    tracker = LeaderTracker(1, [1, 2, 3, 4], (1, 2), high_watermark=67_241, now=0.0, epoch_start=828_364)
    assert tracker.replicated_end(828_364) == 67_241  # 2 has not fetched in this epoch yet
    tracker.record_fetch(3, 100_844, 828_364, now=0.1)
    assert 3 not in tracker.ack_set()
    assert tracker.proposed_isr(now=0.2, lag=1.0) is None
    tracker.record_fetch(2, 828_364, 828_364, now=0.3)
    tracker.record_fetch(3, 828_364, 828_364, now=0.4)  # now it holds everything
    assert tracker.proposed_isr(now=0.5, lag=1.0) == (1, 2, 3)


def test_a_joining_follower_counts_for_acks_before_zookeeper_names_it() -> None:
    tracker = LeaderTracker(1, [1, 2, 3], (1, 2), high_watermark=0, now=0.0)
    tracker.record_fetch(2, 1000, 1000, now=0.1)
    tracker.record_fetch(3, 1000, 1000, now=0.1)  # joins here
    tracker.record_fetch(2, 1200, 1200, now=0.2)  # a new batch reaches 2, not 3
    assert tracker.replicated_end(1200) == 1000
    proposed = tracker.proposed_isr(now=0.3, lag=1.0)
    tracker.begin_write(proposed, base_version=4)
    assert tracker.replicated_end(1200) == 1000  # while the write is out
    tracker.adopt((1, 2), version=4)  # a view from before the write changes nothing
    assert tracker.replicated_end(1200) == 1000
    tracker.adopt(proposed, version=5)  # the write, committed
    assert tracker.isr == (1, 2, 3) and tracker.proposal is None
    tracker.record_fetch(3, 1200, 1200, now=0.4)
    assert tracker.replicated_end(1200) == 1200


def test_an_isr_write_of_unknown_outcome_counts_its_members_until_settled() -> None:
    tracker = LeaderTracker(1, [1, 2, 3], (1, 2, 3), high_watermark=0, now=0.0)
    for r in (2, 3):
        tracker.record_fetch(r, 100, 100, now=0.1)
    tracker.record_fetch(2, 300, 300, now=2.0)  # 3 silent: it is proposed to leave
    tracker.begin_write((1, 2), base_version=7)  # ... and the write's answer is lost
    assert tracker.replicated_end(300) == 100  # 3 still counts: it may still be in
    assert tracker.proposed_isr(now=2.1, lag=1.0) is None  # no second write meanwhile
    tracker.adopt((1, 2, 3), version=7, read_after_write=True)  # it never happened
    assert tracker.proposal is None
    assert tracker.proposed_isr(now=2.2, lag=1.0) == (1, 2)
    tracker.begin_write((1, 2), base_version=7)  # refused: the controller wrote first
    assert tracker.replicated_end(300) == 100  # until the read after it comes back
    tracker.adopt((1, 2), version=8, read_after_write=True)  # the controller's version
    assert tracker.proposal is None and tracker.isr == (1, 2)


def test_a_fetch_from_lower_lowers_the_followers_end() -> None:
    # A follower that lost an unflushed tail (power loss) and came back fetches from
    # below where it was: the leader must not count the bytes it no longer has.
    tracker = LeaderTracker(1, [1, 2], (1, 2), high_watermark=0, now=0.0)
    tracker.record_fetch(2, 500, 500, now=0.1)
    tracker.record_fetch(2, 300, 600, now=0.2)
    assert tracker.replicated_end(600) == 300
    assert tracker.lag_bytes(600) == {2: 300}


def test_a_joining_follower_that_stalls_stops_joining() -> None:
    tracker = LeaderTracker(1, [1, 2, 3], (1, 2), high_watermark=0, now=0.0)
    tracker.record_fetch(3, 0, 0, now=0.1)  # joins
    assert 3 in tracker.ack_set()
    tracker.record_fetch(2, 100, 100, now=2.0)
    assert tracker.proposed_isr(now=2.0, lag=1.0) is None  # 3 silent for 1.9 s
    assert 3 not in tracker.ack_set() and tracker.replicated_end(100) == 100


def test_lag_bytes_per_follower() -> None:
    tracker = LeaderTracker(1, [1, 2, 3], (1, 2, 3), high_watermark=0, now=0.0)
    tracker.record_fetch(2, 70, 100, now=0.1)
    assert tracker.lag_bytes(100) == {2: 30, 3: 100}


# -- reconcile --------------------------------------------------------------------------


def batch(*values: bytes) -> bytes:
    return records.encode_batch(list(values), None, 1_700_000_000_000)


def test_identical_logs_match_completely() -> None:
    log = batch(b"a") + batch(b"b", b"c")
    assert matching_prefix(log, log) == (len(log), False)


def test_a_local_prefix_of_the_leader_is_no_divergence() -> None:
    a, b = batch(b"a"), batch(b"b")
    assert matching_prefix(a + b, a) == (len(a), False)
    assert matching_prefix(a + b, b"") == (0, False)


def test_the_first_differing_batch_is_where_the_logs_part() -> None:
    a, b, c = batch(b"a"), batch(b"bb"), batch(b"cc")
    assert matching_prefix(a + b, a + c) == (len(a), True)


def test_a_local_batch_of_another_size_is_divergence() -> None:
    a, b, c = batch(b"a"), batch(b"b" * 50), batch(b"c")
    assert matching_prefix(a + b, a + c) == (len(a), True)


def test_a_leader_slice_cut_inside_a_batch_is_not_yet_a_verdict() -> None:
    a, b = batch(b"a"), batch(b"b" * 50)
    assert matching_prefix((a + b)[: len(a) + 10], a + b) == (len(a), False)


def test_a_follower_the_controller_dropped_must_fetch_again_to_rejoin() -> None:
    # It fetched just before it died: without the reset the leader would put it back
    # into the ISR the controller had just taken it out of.
    tracker = LeaderTracker(1, [1, 2, 3], (1, 2, 3), high_watermark=0, now=0.0)
    tracker.record_fetch(3, 0, 0, now=0.5)
    tracker.adopt((1, 2), version=1)
    assert tracker.proposed_isr(now=0.6, lag=1.5) is None
    tracker.record_fetch(3, 0, 0, now=0.7)
    assert tracker.proposed_isr(now=0.8, lag=1.5) == (1, 2, 3)


def test_an_older_read_of_the_same_state_znode_is_recognised() -> None:
    newer = PartitionState(1, 2, (1, 2, 3), 101, version=7, created=55)
    assert PartitionState(1, 2, (1, 2), 101, version=6, created=55).older_than(newer)
    assert not PartitionState(1, 2, (1, 2), 101, version=8, created=55).older_than(newer)
    # A re-created topic's state starts again at version 0 but is not older.
    assert not PartitionState(1, 0, (1,), 101, version=0, created=99).older_than(newer)


def test_matching_prefix_finds_the_first_difference_in_random_logs() -> None:
    """Random shared prefixes, random divergent tails, random cuts of the leader's data:
    the reported match is always the last shared batch boundary, never beyond."""
    import random

    rng = random.Random(20261122)
    for _ in range(300):

        def batches(tag: str, n: int) -> list[bytes]:
            return [
                batch(*[b"%s-%d-%d" % (tag.encode(), i, j) * rng.randint(1, 4) for j in range(rng.randint(1, 5))])
                for i in range(n)
            ]

        shared = b"".join(batches("s", rng.randint(0, 5)))
        leader_tail = b"".join(batches("L", rng.randint(0, 4)))
        local_tail = b"".join(batches("F", rng.randint(0, 4)))
        leader = shared + leader_tail
        cut = rng.randint(0, len(leader))  # a fetch may end anywhere
        matched, diverged = matching_prefix(leader[:cut], shared + local_tail)
        assert matched <= len(shared)
        if diverged:  # a verdict is only ever given at the true divergence point
            assert matched == len(shared) and local_tail
        first_leader_batch = records.batch_length_at(leader_tail) if leader_tail else 0
        if leader_tail and local_tail and cut >= len(shared) + first_leader_batch:
            assert diverged  # a whole differing batch was there to compare
        if cut >= len(shared):  # every shared batch arrived whole: all of them match
            assert matched == len(shared)
        boundaries = {pos for pos, _ in records.iter_raw_batches(shared)} | {len(shared)}
        assert matched in boundaries
