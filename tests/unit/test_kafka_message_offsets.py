"""Kafka offsets as message offsets over a real partition log: the position cache
(broker/server/kafka/offsets.py) and committed positions of every stored kind
(broker/server/kafka/commits.py), including commits written before message offsets."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.common.errors import OffsetOutOfRangeError
from broker.server.kafka.commits import MESSAGE_UNIT, Commit, committed_message, parse_commit
from broker.server.kafka.offsets import Positions
from broker.storage.config import LogConfig
from broker.storage.partition_log import PartitionLog
from broker.wire import records


def _log(tmp_path: Path, counts: list[int]) -> tuple[PartitionLog, list[tuple[int, int, int]]]:
    """A log with a batch per count; (byte offset, first message, count) per batch."""
    plog = PartitionLog(tmp_path / "t-0", "t", 0, LogConfig(), False)
    out = []
    for i, count in enumerate(counts):
        message = plog.end_message
        data = records.encode_batch([b"%d-%d" % (i, j) for j in range(count)], None, 1000 + i)
        out.append((plog.append(data, count), message, count))
    plog.flush()
    return plog, out


def test_positions_answer_what_the_log_answers_and_forget_a_truncated_log(tmp_path: Path) -> None:
    plog, batches = _log(tmp_path, [3, 1, 7, 2, 5])
    positions = Positions()
    for offset, message, count in batches:
        assert positions.message_at(plog, offset) == message
        for skip in range(count):
            assert positions.locate(plog, message + skip) == (offset, skip)
    assert positions.high_watermark(plog) == plog.end_message == 18
    assert positions.locate(plog, 18) == (plog.end_offset, 0)
    with pytest.raises(OffsetOutOfRangeError):
        positions.locate(plog, 19)
    # cut the log after the second batch and append others: the cache must not answer
    # for the old bytes
    third = batches[2][0]
    positions.add(plog, 4, third)
    plog.truncate_to(third)
    data = records.encode_batch([b"new"] * 4, None, 5000)
    plog.append(data, 4)
    plog.flush()
    assert positions.locate(plog, 4) == (third, 0)
    assert positions.locate(plog, 6) == (third, 2)
    assert positions.high_watermark(plog) == 8


def test_commits_of_every_kind_read_as_message_offsets(tmp_path: Path) -> None:
    plog, batches = _log(tmp_path, [3, 1, 7, 2])
    (b0, _, _), (b1, _, _), (b2, m2, _), _ = batches
    # a Kafka commit now: a message offset, with or without a copy of the log
    assert parse_commit({"offset": 9, "unit": MESSAGE_UNIT, "time": 5}, kafka=True) == Commit(9, None, True, 5)
    assert committed_message(Commit(9, None, True, 5), None) == 9
    # a native commit: (batch byte offset, messages of it consumed)
    native = parse_commit({"offset": b2, "skip": 4, "time": 6}, kafka=False)
    assert committed_message(native, plog) == m2 + 4 == 8
    assert committed_message(native, None) is None  # no copy: cannot tell
    # a Kafka commit before message offsets: byte offset b + i of the batch at b
    old = parse_commit({"offset": b2 + 4, "time": 7}, kafka=True)
    assert not old.in_messages
    assert committed_message(old, plog) == 8
    assert committed_message(parse_commit({"offset": b0, "time": 1}, kafka=True), plog) == 0
    assert committed_message(parse_commit({"offset": b1 + 1, "time": 1}, kafka=True), plog) == 4  # past its last
    assert committed_message(parse_commit({"offset": plog.end_offset, "time": 1}, kafka=True), plog) == 13
    assert committed_message(parse_commit({"offset": plog.end_offset + 1, "time": 1}, kafka=True), plog) is None


def test_an_old_commit_below_the_log_start_is_out_of_range(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    plog = PartitionLog(directory, "t", 0, LogConfig(segment_bytes=200), False)
    for i in range(20):
        plog.append(records.encode_batch([b"%03d" % i + b"x" * 60] * 2, None, 1000), 2)
    plog.flush()
    plog.config = LogConfig(segment_bytes=200, retention_bytes=600)
    assert plog.enforce_retention(0)
    assert plog.start_message > 0
    below = committed_message(Commit(0, None, False, 0), plog)
    assert below == plog.start_message - 1
    with pytest.raises(OffsetOutOfRangeError):
        plog.batch_for_message(below)
