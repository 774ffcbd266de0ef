"""The pipelined mirror's commit rule: a source position is committable only when the
target acknowledged every batch before it, per partition, in log order."""

from __future__ import annotations

import random

import pytest

from broker.common.errors import RequestTimedOutError
from mirror.commit_tracker import CommitTracker

A, B = ("t", 0), ("t", 1)


def _send(tracker: CommitTracker, tp, *offsets: int, size: int = 100, sends: int = 1) -> list[int]:
    return [tracker.add(tp, o, o + size, messages=10, nbytes=size, sends=sends) for o in offsets]


def test_in_order_acknowledgements_advance_batch_by_batch():
    tracker = CommitTracker()
    ids = _send(tracker, A, 0, 100, 200)
    assert tracker.inflight_bytes == 300 and len(tracker) == 3
    tracker.acked(ids[0])
    assert tracker.advance().positions == {A: 100}
    tracker.acked(ids[1])
    tracker.acked(ids[2])
    advanced = tracker.advance()
    assert advanced.positions == {A: 300}
    assert [b.offset for b in advanced.done] == [100, 200]
    assert tracker.inflight_bytes == 0 and len(tracker) == 0
    assert tracker.advance().positions == {}  # nothing new


def test_out_of_order_acknowledgements_wait_for_the_oldest():
    tracker = CommitTracker()
    ids = _send(tracker, A, 0, 100, 200)
    tracker.acked(ids[2])
    tracker.acked(ids[1])
    assert tracker.advance().positions == {}  # [0,100) is not on the target yet
    assert tracker.inflight_bytes == 300
    tracker.acked(ids[0])
    assert tracker.advance().positions == {A: 300}


def test_partitions_are_independent():
    tracker = CommitTracker()
    a = _send(tracker, A, 0, 100)
    b = _send(tracker, B, 0, 100)
    tracker.acked(b[0])
    tracker.acked(b[1])
    tracker.acked(a[1])
    assert tracker.advance().positions == {B: 200}
    assert [x.offset for x in tracker.pending(A)] == [0, 100]


def test_a_failure_is_a_gap_nothing_past_it_commits_until_retried_and_acked():
    tracker = CommitTracker()
    ids = _send(tracker, A, 0, 100, 200, 300)
    tracker.acked(ids[0])
    tracker.failed(ids[1], RequestTimedOutError("target down"))
    tracker.acked(ids[2])
    tracker.acked(ids[3])
    assert tracker.advance().positions == {A: 100}  # up to the gap, not past it
    assert tracker.advance().positions == {}
    [(failed_id, batch)] = tracker.failures()
    assert failed_id == ids[1] and batch.offset == 100 and isinstance(batch.error, RequestTimedOutError)
    tracker.acked(ids[1])  # a late ack of the failed attempt does not count
    assert tracker.advance().positions == {}
    tracker.retry(ids[1])
    assert tracker.failures() == []
    assert tracker.advance().positions == {}  # retried, not yet acknowledged
    tracker.acked(ids[1])
    assert tracker.advance().positions == {A: 400}
    assert tracker.inflight_bytes == 0


def test_retry_only_of_a_failed_batch():
    tracker = CommitTracker()
    (i,) = _send(tracker, A, 0)
    with pytest.raises(ValueError):
        tracker.retry(i)


def test_a_rehashed_batch_counts_when_all_its_target_batches_are_acked():
    tracker = CommitTracker()
    (i,) = _send(tracker, A, 0, sends=3)
    tracker.acked(i)
    tracker.acked(i)
    assert tracker.advance().positions == {}
    tracker.acked(i)
    assert tracker.advance().positions == {A: 100}
    with pytest.raises(ValueError):
        tracker.add(A, 100, 200, sends=0)


def test_one_failed_target_batch_fails_the_source_batch():
    tracker = CommitTracker()
    (i,) = _send(tracker, A, 0, sends=2)
    tracker.acked(i)
    tracker.failed(i, RequestTimedOutError("x"))
    assert tracker.advance().positions == {}
    assert len(tracker.failures()) == 1


@pytest.mark.parametrize("seed", range(20))
def test_random_ack_orders_never_commit_past_an_unacknowledged_batch(seed):
    rng = random.Random(seed)
    tracker = CommitTracker()
    ids = {tp: _send(tracker, tp, *range(0, 2000, 100)) for tp in (A, B)}
    order = [(tp, n) for tp in ids for n in range(len(ids[tp]))]
    rng.shuffle(order)
    acked: dict = {A: set(), B: set()}
    committed = {A: 0, B: 0}
    for tp, n in order:
        tracker.acked(ids[tp][n])
        acked[tp].add(n)
        for p, position in tracker.advance().positions.items():
            assert position > committed[p]  # only forward
            committed[p] = position
        for p in (A, B):  # committed == end of the longest acknowledged prefix
            prefix = 0
            while prefix in acked[p]:
                prefix += 1
            assert committed[p] == prefix * 100
    assert committed == {A: 2000, B: 2000} and tracker.inflight_bytes == 0
