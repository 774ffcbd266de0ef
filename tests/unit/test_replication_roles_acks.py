"""The sans-IO parts of a broker's replicas: which role a partition state gives, and
how acks=all answers wait for the in-sync replicas (with a real partition log)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from broker.common.errors import NotEnoughReplicasAfterAppendError, NotEnoughReplicasError
from broker.coordination.partition_state import PartitionState
from broker.replication import acks
from broker.replication.isr import LeaderTracker
from broker.replication.roles import FOLLOWER, LEADER, OFFLINE, Replica, role_for, same_term
from broker.storage.config import LogConfig
from broker.storage.partition_log import PartitionLog
from broker.wire import records

ME, SESSION = 1, 101


class Waiting:
    """A produce request's stand-in: records each part's answer."""

    def __init__(self) -> None:
        self.done: dict[int, Exception | None] = {}

    def part_done(self, index: int, error: Exception | None = None) -> None:
        self.done[index] = error


@pytest.mark.parametrize(
    "state, role, leader",
    [
        (None, OFFLINE, -1),
        (PartitionState(-1, 4, (1,)), OFFLINE, -1),
        (PartitionState(ME, 4, (1, 2), SESSION), LEADER, ME),
        (PartitionState(ME, 4, (1, 2), SESSION - 1), OFFLINE, ME),  # elected in an older session
        (PartitionState(2, 4, (1, 2), 55), FOLLOWER, 2),
    ],
)
def test_the_role_a_state_gives(state, role, leader):
    assert role_for(state, ME, SESSION) == (role, leader)


def test_no_session_yet_means_no_leading():
    assert role_for(PartitionState(ME, 4, (1, 2), SESSION), ME, 0) == (OFFLINE, ME)


_opened: list[PartitionLog] = []
"""The logs a test opened, closed after it (their segment files with them)."""


@pytest.fixture(autouse=True)
def _close_logs() -> Iterator[None]:
    yield
    while _opened:
        _opened.pop().close()


def _replica(tmp_path, isr=(1, 2), min_insync=2) -> Replica:
    plog = PartitionLog(tmp_path / "t-0", "t", 0, LogConfig(), recover=False)
    _opened.append(plog)
    replica = Replica(("t", 0), plog)
    replica.replicas = [1, 2]
    replica.min_insync = min_insync
    replica.state = PartitionState(ME, 4, isr, SESSION, version=3)
    replica.role = LEADER
    replica.tracker = LeaderTracker(ME, replica.replicas, isr, 0, 0.0)
    return replica


def test_same_term_only_under_the_same_leader_and_epoch(tmp_path):
    replica = _replica(tmp_path)
    assert same_term(replica, PartitionState(ME, 4, (1,), SESSION, version=4), LEADER)
    assert not same_term(replica, PartitionState(ME, 5, (1, 2), SESSION), LEADER)
    assert not same_term(replica, PartitionState(2, 4, (1, 2), 55), FOLLOWER)
    assert not same_term(replica, None, OFFLINE)


def test_too_few_in_sync_refuses_before_appending(tmp_path):
    acks.check_min_insync(_replica(tmp_path))
    with pytest.raises(NotEnoughReplicasError, match="min_insync_replicas=2"):
        acks.check_min_insync(_replica(tmp_path, isr=(1,)))


def test_an_answer_waits_until_every_in_sync_replica_has_the_batch(tmp_path):
    replica = _replica(tmp_path)
    replica.plog.append(records.encode_batch([b"x"] * 3, None, 1_700_000_000_000), 3)
    end = replica.plog.end_offset
    waiting = Waiting()
    assert acks.wait(replica, end, waiting, 0, timeout_ms=5000)
    acks.release(replica)
    assert waiting.done == {}
    replica.tracker.record_fetch(2, end, end, 1.0)
    acks.release(replica)
    assert waiting.done == {0: None} and replica.pending_acks == []


def test_an_answer_the_isr_already_has_does_not_wait(tmp_path):
    replica = _replica(tmp_path, isr=(1,), min_insync=1)
    assert not acks.wait(replica, 0, Waiting(), 0, timeout_ms=5000)
    assert replica.pending_acks == []


def test_waits_past_their_deadline_fail_and_the_rest_keep_waiting(tmp_path):
    replica = _replica(tmp_path)
    early, late = Waiting(), Waiting()
    replica.pending_acks = [(10, early, 0, 5.0), (10, late, 1, 50.0)]
    acks.expire(replica, 6.0, timeout_ms=5000)
    assert isinstance(early.done[0], NotEnoughReplicasAfterAppendError)
    assert "within 5000 ms" in str(early.done[0])
    assert late.done == {} and len(replica.pending_acks) == 1


def test_leaving_the_leader_role_fails_every_wait(tmp_path):
    replica = _replica(tmp_path)
    waiting = Waiting()
    replica.pending_acks = [(10, waiting, 0, 50.0), (20, waiting, 1, 50.0)]
    acks.fail(replica, NotEnoughReplicasError("gone"), ME)
    assert set(waiting.done) == {0, 1} and replica.pending_acks == []
    assert all("appended by broker 1" in str(e) for e in waiting.done.values())


def test_each_epochs_acks_all_answers_are_logged_as_one_span(tmp_path, caplog):
    # what the nemesis checker reads: when each leader epoch's answers began and ended
    caplog.set_level("INFO", logger="logferry.replication")
    replica = _replica(tmp_path)
    ends = []
    for _ in range(3):
        replica.plog.append(records.encode_batch([b"x"], None, 1_700_000_000_000), 1)
        ends.append(replica.plog.end_offset)
        replica.pending_acks.append((ends[-1], Waiting(), 0, 50.0))
    replica.tracker.record_fetch(2, ends[1], ends[2], 1.0)
    acks.release(replica)  # two answered
    replica.tracker.record_fetch(2, ends[2], ends[2], 1.1)
    acks.release(replica)  # one more, the same epoch
    acks.release(replica)  # nothing to answer: nothing noted
    assert replica.answered is not None and (replica.answered.epoch, replica.answered.count) == (4, 3)
    began = [r.getMessage() for r in caplog.records if "began" in r.getMessage()]
    assert len(began) == 1 and began[0].startswith("t-0: acks=all answers in leader epoch 4 began at ")

    replica.state = PartitionState(ME, 5, (1, 2), SESSION, version=4)  # led again, a new epoch
    replica.pending_acks.append((ends[2], Waiting(), 0, 50.0))
    acks.release(replica)
    acks.fail(replica, NotEnoughReplicasError("gone"), ME)  # leadership ends
    lines = [r.getMessage() for r in caplog.records]
    ended = [line for line in lines if "ended" in line]
    assert [line.split(" at ")[0] for line in ended] == [
        "t-0: acks=all answers in leader epoch 4 ended",
        "t-0: acks=all answers in leader epoch 5 ended",
    ]
    assert ended[0].endswith("(3 answered)") and ended[1].endswith("(1 answered)")
    assert replica.answered is None
    acks.fail(replica, NotEnoughReplicasError("gone"), ME)  # nothing more to log
    assert len([r for r in caplog.records if "ended" in r.getMessage()]) == 2
