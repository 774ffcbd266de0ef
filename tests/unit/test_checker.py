"""The nemesis checker's rules (tests/support/checker.py), on made-up runs: each broken
guarantee is found and counted, a sound run has no problem."""

from __future__ import annotations

import pytest

from tests.support.checker import AnswerSpan, GroupRun, answer_spans, check, check_lines, two_leaders, unavailable_s
from tests.support.workload import Batch, value


def _acked(partition: int, first: int, n: int, at: float) -> Batch:
    return Batch(partition, range(first, first + n), sent_at=at - 0.01, done_at=at, outcome="acked")


def _values(partition: int, seqs: list[int]) -> list[bytes]:
    return [value(partition, s) for s in seqs]


def test_a_sound_run_has_no_problem_and_counts_outcomes() -> None:
    batches = [
        _acked(0, 0, 2, 1.0),
        Batch(0, range(2, 4), 1.1, 1.5, "failed", "RequestTimedOutError"),
        _acked(0, 4, 2, 2.0),
    ]
    stored = {0: _values(0, [0, 1, 2, 3, 4, 5])}  # a failed batch may be stored: no loss, no problem
    verdict = check(batches, stored, {0: [b"abc", b"abc", b"abc"]}, fault_at=0.0, until=3.0)
    assert verdict.problems() == []
    assert (verdict.acked, verdict.failed, verdict.unknown, verdict.stored) == (4, 2, 0, 6)


def test_loss_duplicates_disorder_and_divergence_are_each_counted() -> None:
    batches = [_acked(0, 0, 4, 1.0), _acked(1, 0, 2, 1.0)]
    stored = {0: _values(0, [0, 2, 1, 2]), 1: _values(1, [0])}  # p0: 3 lost, 2 twice, 1 before 2; p1: 1 lost
    replicas = {0: [b"ab", b"ab", b"ab"], 1: [b"ab", b"ax", b"ab"]}
    verdict = check(batches, stored, replicas, fault_at=0.0, until=2.0)
    assert (verdict.lost, verdict.duplicates, verdict.order_violations) == (2, 1, 1)
    assert verdict.divergent == [1]
    assert len(verdict.problems()) == 4


def test_unavailability_is_the_longest_stretch_without_an_ack_from_the_fault_on() -> None:
    batches = [_acked(0, i, 1, t) for i, t in enumerate([0.5, 1.0, 1.2, 9.0, 9.1])] + [_acked(1, 0, 1, 0.9)]
    assert unavailable_s(batches, 0, fault_at=1.0, until=10.0) == 9.0 - 1.2
    assert unavailable_s(batches, 1, fault_at=1.0, until=10.0) == 9.0  # nothing acked after the fault
    assert unavailable_s(batches, 0, fault_at=9.2, until=10.0) == 10.0 - 9.2


def test_reads_are_judged_against_what_the_partitions_hold_in_the_end() -> None:
    batches = [_acked(0, 0, 4, 1.0), _acked(1, 0, 3, 1.0), _acked(2, 0, 2, 1.0)]
    stored = {0: _values(0, [0, 1, 2, 3]), 1: _values(1, [0, 1, 2]), 2: _values(2, [0, 1])}
    replicas = {p: [b"x", b"x", b"x"] for p in stored}
    sound = {0: _values(0, [0, 1, 2]), 1: _values(1, [0, 1, 2]), 2: []}  # a start of each: fine
    verdict = check(batches, stored, replicas, fault_at=0.0, until=2.0, reads=sound)
    assert verdict.problems() == [] and verdict.read == 6
    assert "read 6 (0 in the fault): phantom 0, out of order 0, divergent 0" in verdict.summary()

    # p0: message 7 was read, then vanished (a read above the high watermark, truncated);
    # p1: 1 read twice; p2: 1 read before 0
    bad = {0: _values(0, [0, 1, 7]), 1: _values(1, [0, 1, 1]), 2: _values(2, [1, 0])}
    verdict = check(batches, stored, replicas, fault_at=0.0, until=2.0, reads=bad)
    assert (verdict.phantom_reads, verdict.read_order_violations, verdict.divergent_reads) == (1, 2, [0, 1, 2])
    assert len(verdict.problems()) == 3
    assert any("p0 read but not held e.g. [b'0:000000007']" in e for e in verdict.examples)
    assert check(batches, stored, replicas, fault_at=0.0, until=2.0).read == 0  # no reader: nothing judged


BROKER_1_LOG = """\
23:44:48,545 INFO  logferry.replication: jepsen-0: leader in epoch 0, isr [1, 2, 3], log end 0
23:44:49,001 INFO  logferry.replication: jepsen-0: acks=all answers in leader epoch 0 began at 100.000
23:44:58,001 INFO  logferry.replication: jepsen-0: acks=all answers in leader epoch 0 ended at 110.020 (9 answered)
23:44:58,001 INFO  logferry.replication: other-0: acks=all answers in leader epoch 0 began at 100.500
"""
BROKER_2_LOG = """\
23:44:57,001 INFO  logferry.replication: jepsen-0: acks=all answers in leader epoch 1 began at 110.000
23:44:57,001 INFO  logferry.replication: jepsen-1: acks=all answers in leader epoch 0 began at 100.100
"""


def test_two_leaders_in_one_epoch_are_a_problem_and_an_older_leaders_late_answers_are_measured() -> None:
    spans = answer_spans(1, BROKER_1_LOG, "jepsen") + answer_spans(2, BROKER_2_LOG, "jepsen")
    assert spans == [
        AnswerSpan(1, 0, 0, 100.0, 110.02),
        AnswerSpan(2, 0, 1, 110.0, None),  # still leads: no end
        AnswerSpan(2, 1, 0, 100.1, None),
    ]
    doubled, overlap = two_leaders(spans)
    assert doubled == []
    assert overlap[0] == pytest.approx(0.02) and overlap[1] == 0.0  # broker 1 answered 20 ms into epoch 1

    batches = [_acked(0, 0, 1, 1.0)]
    stored, replicas = {0: _values(0, [0])}, {0: [b"x", b"x", b"x"]}
    sound = check(batches, stored, replicas, fault_at=0.0, until=2.0, spans=spans)
    assert sound.problems() == [] and "leader overlap p0 0.020s, p1 0.000s" in sound.summary()

    # broker 3 answered in epoch 1 too (two leaders at once); broker 1 never logged the
    # end of epoch 0 although broker 2 leads in epoch 1 (a zombie still answering)
    zombie = [AnswerSpan(1, 0, 0, 100.0, None), AnswerSpan(2, 0, 1, 110.0, None), AnswerSpan(3, 0, 1, 111.0, 112.0)]
    verdict = check(batches, stored, replicas, fault_at=0.0, until=2.0, spans=zombie)
    assert verdict.two_leaders == ["p0 epoch 1: acks=all writes answered by brokers [2, 3]"]
    assert verdict.problems() == [
        "p0 epoch 1: acks=all writes answered by brokers [2, 3]",
        "a leader of an older epoch never stopped answering in partitions [0]",
    ]


def test_a_groups_reads_and_commits_are_judged_against_what_survives() -> None:
    # p0 holds 4 messages in two batches of 2 at offsets 0 and 30 (end 60).
    batches = [_acked(0, 0, 4, 1.0)]
    stored = {0: _values(0, [0, 1, 2, 3])}
    positions = {0: [(0, 0), (0, 1), (30, 0), (30, 1)]}
    replicas = {0: [b"x", b"x", b"x"]}

    def judge(reads: list[int], committed: tuple[int, int]) -> tuple[int, list[int], int, list[str]]:
        group = GroupRun({0: _values(0, reads)}, {0: committed}, positions, {0: 60})
        verdict = check(batches, stored, replicas, fault_at=0.0, until=2.0, group=group)
        found = (verdict.group_phantom_reads, verdict.group_committed_beyond, verdict.group_skipped)
        return (*found, verdict.problems())

    assert judge([0, 1, 2], (30, 1)) == (0, [], 0, [])  # read 3, committed after the third
    assert judge([0, 1, 2, 3], (60, 0)) == (0, [], 0, [])  # committed at the end
    phantom, _, _, problems = judge([0, 1, 2, 3, 9], (60, 0))  # 9 was handed out, then cut
    assert phantom == 1 and len(problems) == 1
    assert judge([0, 1], (90, 0))[1] == [0]  # committed past the end: the log was cut below it
    assert judge([0, 1], (15, 0))[1] == [0]  # not a batch of the final log
    skipped = judge([0], (30, 1))  # committed after message 2, yet 1 and 2 were never handed out
    assert skipped[2] == 2 and len(skipped[3]) == 1


def test_a_span_left_open_by_kill_9_ends_at_the_kill() -> None:
    log = "t-1: acks=all answers in leader epoch 4 began at 100.000\n"  # then kill -9: no end line
    assert answer_spans(2, log, "t")[0].ended is None  # as far as the log knows, it still answers
    killed = answer_spans(2, log, "t", killed_at=[90.0, 105.5])  # killed before it began, then at 105.5
    assert killed[0].ended == 105.5
    successor = AnswerSpan(3, 1, 5, 106.0, None)
    assert two_leaders([*killed, successor]) == ([], {1: 0.0})  # it stopped before its successor began
    assert two_leaders([answer_spans(2, log, "t")[0], successor])[1] == {1: float("inf")}


def test_lines_are_counted_from_the_files_to_the_analysis_cluster() -> None:
    written = [("/l/a.log", 0, "one"), ("/l/a.log", 4, "two"), ("/l/b.log", 0, "three"), ("/l/b.log", 6, "four")]
    live = {"t-0": written[:2], "t-1": written[2:]}
    sound = check_lines(written, live, live)
    assert not sound.problems() and (sound.written, sound.live, sound.mirrored) == (4, 4, 4)

    other = ("/elsewhere.log", 0, "not ours")  # another file's records are not counted
    mirrored = {"t-0": [written[1], written[0], written[1], other], "t-1": [written[2]]}
    bad = check_lines(written, live, mirrored, differ=["t-1"])
    assert (bad.lost, bad.duplicates, bad.order_violations, bad.mirrored) == (1, 1, 1, 4)
    assert len(bad.problems()) == 4 and bad.differ == ["t-1"]
