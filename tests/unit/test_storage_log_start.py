"""A partition log started at a message (Kafka's DeleteRecords) on real files: what is
hidden, which segments go, the start after a reopen, retention, truncation and a
follower taking its leader's start (broker/storage/log_start.py)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from broker.common.errors import OffsetOutOfRangeError
from broker.storage.config import LogConfig
from broker.storage.log_start import FILE_NAME, LogStart, read_log_start
from broker.storage.partition_log import PartitionLog
from broker.wire import records

COUNT = 4
"""Messages per batch."""


def open_log(directory: Path, **config: int) -> PartitionLog:
    return PartitionLog(directory, "t", 0, LogConfig(**{"segment_bytes": 1000, **config}), False)


def fill(plog: PartitionLog, batches: int) -> list[int]:
    """Append ``batches`` batches of COUNT messages; the byte offset of each."""
    offsets = []
    for i in range(batches):
        data = records.encode_batch([b"m%d-%d" % (i, j) + b"x" * 40 for j in range(COUNT)], None, 1000 + i)
        offsets.append(plog.append(data, COUNT))
    plog.flush()
    return offsets


def messages_read(plog: PartitionLog) -> int:
    """Messages a reader gets from the log start to the end, whole batches."""
    offset, total = plog.start_offset, 0
    while offset < plog.end_offset:
        raw = plog.read_bytes(offset, 1 << 20)
        batches, _ = records.decode_batches(raw, offset)
        total += sum(len(b.values) for b in batches)
        offset = batches[-1].next_offset
    return total


def test_a_start_inside_a_segment_hides_what_is_below_and_deletes_whole_segments(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0")
    offsets = fill(plog, 60)
    segments = len(plog.segments)
    assert segments > 4
    target = 30 * COUNT + 2  # the third message of batch 30
    start = plog.delete_records_before(target)
    assert start == LogStart(offsets[30], target, 30 * COUNT)
    assert (plog.start_offset, plog.start_message) == (offsets[30], target)
    assert plog.segments[0].base_offset <= offsets[30] < plog.segments[0].end_offset
    assert len(plog.segments) < segments
    assert read_log_start(plog.directory, plog.name) == start
    for below in (target - 1, 0):
        with pytest.raises(OffsetOutOfRangeError):
            plog.batch_for_message(below)
    assert plog.batch_for_message(target) == (offsets[30], 2)
    with pytest.raises(OffsetOutOfRangeError):
        plog.read_slice(offsets[29], 1000)
    assert plog.read_slice(offsets[30], 1000).count > 0
    assert plog.batch_start_at_or_before(offsets[29]) == offsets[30]
    assert messages_read(plog) == (60 - 30) * COUNT  # the batch holding the start is read whole
    assert plog.offset_for_time(0) == offsets[30]
    # at or below the start: nothing changes; past the end: refused
    assert plog.delete_records_before(5) == start
    with pytest.raises(OffsetOutOfRangeError):
        plog.delete_records_before(plog.end_message + 1)
    plog.close()


def test_the_start_holds_after_a_reopen_and_goes_when_retention_passes_it(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    plog = open_log(directory)
    offsets = fill(plog, 40)
    plog.delete_records_before(10 * COUNT + 1)
    plog.close()
    again = open_log(directory)
    assert (again.start_offset, again.start_message) == (offsets[10], 10 * COUNT + 1)
    assert messages_read(again) == 30 * COUNT
    fill(again, 20)
    again.config = LogConfig(segment_bytes=1000, retention_bytes=3000)
    again.enforce_retention(int(time.time() * 1000))
    assert again.start_offset == again.segments[0].base_offset > offsets[10]
    assert again.start_message == again.segments[0].index.base_message
    assert not (directory / FILE_NAME).exists()
    again.close()


def test_a_start_at_the_end_empties_the_log_for_readers(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0")
    fill(plog, 10)
    end = plog.end_message
    plog.delete_records_before(end)
    assert (plog.start_offset, plog.start_message) == (plog.end_offset, end)
    assert messages_read(plog) == 0
    assert plog.last_batch() is None
    fill(plog, 2)
    assert messages_read(plog) == 2 * COUNT
    plog.close()


def test_a_follower_takes_its_leaders_start_and_truncation_below_it_forgets_it(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0")
    offsets = fill(plog, 20)
    bases = {s.base_offset for s in plog.segments}
    k = next(i for i in range(5, 20) if offsets[i] not in bases)  # not a segment's first batch
    assert plog.advance_start(offsets[k], k * COUNT + 1)
    assert (plog.start_offset, plog.start_message) == (offsets[k], k * COUNT + 1)
    assert not plog.advance_start(offsets[k - 1], (k - 1) * COUNT)  # behind its own start
    assert not plog.advance_start(plog.end_offset + 100, plog.end_message + 9)  # past its log
    assert plog.start_message == k * COUNT + 1
    plog.truncate_to(offsets[k - 1])  # below the start, inside the first segment
    first = plog.segments[0]
    assert (plog.start_offset, plog.start_message) == (first.base_offset, first.index.base_message)
    assert read_log_start(plog.directory, plog.name) is None
    plog.close()


def test_an_unreadable_or_misplaced_start_file_is_ignored(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    directory = tmp_path / "t-0"
    plog = open_log(directory)
    fill(plog, 5)
    plog.close()
    for content in ("{not json", '{"offset": 999999, "message": 3}'):
        (directory / FILE_NAME).write_text(content)
        again = open_log(directory)
        assert (again.start_offset, again.start_message) == (0, 0)
        again.close()
    assert "ignoring" in caplog.text
