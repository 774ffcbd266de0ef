"""Message offsets of a partition log on real files: rolls, reopening, crash recovery,
retention, truncation, restarts, and logs written before message offsets existed."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytest

from broker.common.errors import InvalidOffsetError, OffsetOutOfRangeError
from broker.storage.config import LogConfig
from broker.storage.partition_log import PartitionLog
from broker.wire import records


def batch(i: int) -> tuple[bytes, int]:
    count = 1 + i % 5
    return records.encode_batch([b"%d-%d-" % (i, j) + b"x" * 30 for j in range(count)], None, 1000 + i), count


def open_log(directory: Path, recover: bool = False, **config: Any) -> PartitionLog:
    return PartitionLog(directory, "t", 0, LogConfig(**config), recover)


def fill(plog: PartitionLog, n: int, first: int = 0) -> list[tuple[int, int, int]]:
    """Append n batches, one per append, and some in sets of three; returns (byte
    offset, first message, count) per batch."""
    out = []
    i = first
    while i < first + n:
        group = [batch(j) for j in range(i, min(i + (3 if i % 4 == 0 else 1), first + n))]
        data = b"".join(b for b, _ in group)
        message = plog.end_message
        at = plog.append(data, sum(c for _, c in group))
        for b, c in group:
            out.append((at, message, c))
            at += len(b)
            message += c
        i += len(group)
    return out


def check(plog: PartitionLog, batches: list[tuple[int, int, int]]) -> None:
    for offset, message, count in batches:
        if offset < plog.start_offset:
            continue
        assert plog.message_offset_at(offset) == message
        for skip in range(count):
            assert plog.batch_for_message(message + skip) == (offset, skip)
    assert plog.message_offset_at(plog.end_offset) == plog.end_message
    assert plog.batch_for_message(plog.end_message) == (plog.end_offset, 0)


def index_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.suffix == ".index")


def test_offsets_across_rolls_and_a_clean_reopen(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    plog = open_log(directory, segment_bytes=2000)
    batches = fill(plog, 200)
    assert len(plog.segments) > 5
    total = sum(c for _, _, c in batches)
    assert (plog.start_message, plog.end_message) == (0, total)
    check(plog, batches)
    plog.close()
    assert index_files(directory) == [s.path.with_suffix(".index").name for s in plog.segments]
    again = open_log(directory, segment_bytes=2000)
    assert (again.start_message, again.end_message) == (0, total)
    check(again, batches)
    batches += fill(again, 50, first=200)
    check(again, batches)
    again.close()


def test_lookups_refuse_what_is_not_there(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0")
    batches = fill(plog, 10)
    with pytest.raises(InvalidOffsetError):
        plog.message_offset_at(batches[3][0] + 1)
    with pytest.raises(OffsetOutOfRangeError) as info:
        plog.batch_for_message(plog.end_message + 1)
    assert (info.value.start, info.value.end) == (0, plog.end_message)
    with pytest.raises(OffsetOutOfRangeError):
        plog.message_offset_at(plog.end_offset + 1)
    plog.close()


def test_the_visible_end_in_messages_follows_the_flush(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0")
    fill(plog, 4)
    flushed = plog.end_message
    plog.flush()
    fill(plog, 4, first=4)
    assert plog.visible_end_message == flushed < plog.end_message
    plog.flush()
    assert plog.visible_end_message == plog.end_message
    plog.close()


def test_the_visible_end_in_messages_walks_on_from_the_last_answer(tmp_path: Path) -> None:
    # a high watermark one batch behind a growing log, read after every append, across
    # rolls and a truncation: each answer the walk from the index would give
    plog = open_log(tmp_path / "t-0", segment_bytes=3000)
    batches = fill(plog, 40)
    plog.flush()  # visible once flushed; the high watermark caps it below
    for i in range(40, 160):
        if i == 100:
            at, message, _ = batches[90]
            plog.truncate_to(at)  # the hint of the old tail must not survive the cut
            batches = batches[:90] + fill(plog, 12, first=1000)  # other batches past it
        before = plog.end_offset
        batches += fill(plog, 1, first=i)
        plog.flush()
        plog.set_high_watermark(before)
        assert plog.visible_end_message == batches[-1][1] == plog.message_offset_at(before)
        assert plog.visible_end_message == batches[-1][1]  # asked again, not moved
        if i % 7 == 0:  # now and then one further back than the last answer: from the index
            plog.set_high_watermark(batches[-3][0])
            assert plog.visible_end_message == batches[-3][1]
    assert len(plog.segments) > 3
    plog.set_high_watermark(None)
    assert plog.visible_end_message == plog.end_message
    plog.close()


@pytest.mark.parametrize("damage", ["missing", "garbage", "flipped", "stale"])
def test_a_missing_or_bad_index_is_rebuilt_from_the_segment(tmp_path: Path, damage: str) -> None:
    directory = tmp_path / "t-0"
    plog = open_log(directory, segment_bytes=2000)
    batches = fill(plog, 120)
    plog.close()
    victim = plog.segments[2].path.with_suffix(".index")
    if damage == "missing":
        victim.unlink()
    elif damage == "garbage":
        victim.write_bytes(b"garbage")
    elif damage == "flipped":
        data = bytearray(victim.read_bytes())
        data[-3] ^= 0x40
        victim.write_bytes(bytes(data))
    else:  # an index written before the segment grew (a crash after appends)
        index = plog.segments[2].index
        index.truncate(index.size - 1)
        victim.write_bytes(index.encode())
    again = open_log(directory, segment_bytes=2000)
    check(again, batches)
    again.close()
    third = open_log(directory, segment_bytes=2000)  # the rebuilt index was saved
    assert third.segments[2].index.saved_size == third.segments[2].size == plog.segments[2].size
    third.close()


def test_a_log_written_before_message_offsets_gets_its_indexes(tmp_path: Path) -> None:
    # Today's main writes only the .log files: the same bytes without any .index.
    directory = tmp_path / "t-0"
    plog = open_log(directory, segment_bytes=2000)
    batches = fill(plog, 100)
    plog.close()
    for name in index_files(directory):
        (directory / name).unlink()
    again = open_log(directory, segment_bytes=2000)
    assert again.start_message == 0
    check(again, batches)
    again.close()
    assert len(index_files(directory)) == len(again.segments)


def test_an_old_log_cut_by_retention_counts_from_its_first_byte(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    plog = open_log(directory, segment_bytes=2000)
    fill(plog, 100)
    plog.close()
    first = plog.segments[0]
    first.path.unlink()  # retention ran under the old code
    for name in index_files(directory):
        (directory / name).unlink()
    again = open_log(directory, recover=True, segment_bytes=2000)
    assert again.start_offset == plog.segments[1].base_offset
    assert again.start_message == again.start_offset  # unknowable: the first byte offset
    again.close()


def test_kill_9_leaves_a_stale_index_that_recovery_rebuilds(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    plog = open_log(directory, segment_bytes=2000)
    batches = fill(plog, 60)
    plog.close()  # a clean close wrote every index
    again = open_log(directory, segment_bytes=2000)
    batches += fill(again, 40, first=60)  # then appends, rolls ... and a kill -9:
    tail = again.segments[-1]
    os.truncate(tail.path, tail.size - 7)  # a torn last batch
    # (no close: the active segment's index on disk is the one written at its roll)
    recovered = open_log(directory, recover=True, segment_bytes=2000)
    kept = [b for b in batches if b[0] < recovered.end_offset]
    assert len(kept) == len(batches) - 1
    check(recovered, kept)
    assert recovered.end_message == batches[-1][1]
    recovered.close()


def test_retention_keeps_message_offsets_and_survives_losing_the_first_index(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    plog = open_log(directory, segment_bytes=2000)
    batches = fill(plog, 150)
    end_message = plog.end_message
    plog.config = LogConfig(segment_bytes=2000, retention_bytes=5000)
    deleted = plog.enforce_retention(0)
    assert deleted
    assert plog.start_message > 0
    assert plog.start_message == next(m for o, m, _ in batches if o == plog.start_offset)
    assert plog.end_message == end_message
    check(plog, batches)
    with pytest.raises(OffsetOutOfRangeError):
        plog.batch_for_message(plog.start_message - 1)
    start = plog.start_message
    plog.close()
    assert index_files(directory) == sorted(s.path.with_suffix(".index").name for s in plog.segments)
    # Every index but the first one's lost: the first header still anchors them.
    for seg in plog.segments[1:]:
        seg.path.with_suffix(".index").unlink()
    again = open_log(directory, recover=True, segment_bytes=2000)
    assert (again.start_message, again.end_message) == (start, end_message)
    check(again, batches)
    # ... and only the first one lost: the next one anchors it backward.
    again.close()
    again.segments[0].path.with_suffix(".index").unlink()
    third = open_log(directory, segment_bytes=2000)
    assert (third.start_message, third.end_message) == (start, end_message)
    third.close()


def test_truncation_cuts_message_offsets_too(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    plog = open_log(directory, segment_bytes=2000)
    batches = fill(plog, 100)
    at, message, _ = batches[57]
    plog.truncate_to(at)
    assert plog.end_message == message
    kept = batches[:57]
    check(plog, kept)
    kept += fill(plog, 20, first=500)
    check(plog, kept)
    plog.close()
    again = open_log(directory, segment_bytes=2000)
    check(again, kept)
    again.close()


def test_truncation_to_the_log_start_and_restarts(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    plog = open_log(directory, segment_bytes=2000)
    fill(plog, 100)
    plog.config = LogConfig(segment_bytes=2000, retention_bytes=3000)
    plog.enforce_retention(0)
    start, start_message = plog.start_offset, plog.start_message
    plog.truncate_to(start)
    assert (plog.end_offset, plog.start_message, plog.end_message) == (start, start_message, start_message)
    plog.restart_at(10_000, message=777)
    assert (plog.start_message, plog.end_message) == (777, 777)
    batches = fill(plog, 5)
    check(plog, batches)
    plog.close()
    again = open_log(directory, recover=True, segment_bytes=2000)
    assert again.start_message == 777
    check(again, batches)
    again.close()


def test_stray_index_files_are_removed(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    directory = tmp_path / "t-0"
    plog = open_log(directory)
    fill(plog, 3)
    plog.close()
    (directory / "00000000000000999999.index").write_bytes(b"x")
    (directory / "00000000000000000000.index.tmp").write_bytes(b"x")
    with caplog.at_level(logging.INFO, logger="logferry.storage"):
        open_log(directory).close()
    assert index_files(directory) == ["00000000000000000000.index"]
    assert not (directory / "00000000000000000000.index.tmp").exists()


def test_replicas_with_other_segment_boundaries_agree(tmp_path: Path) -> None:
    # A leader and a follower hold the same bytes, appended in other groupings (a
    # follower appends what each fetch brought) and rolled at other sizes.
    leader = open_log(tmp_path / "leader" / "t-0", segment_bytes=1500)
    batches = fill(leader, 150)
    follower = open_log(tmp_path / "follower" / "t-0", segment_bytes=5000)
    starts = [o for o, _, _ in batches] + [leader.end_offset]
    offset = 0
    while offset < leader.end_offset:  # what replica fetches of up to 2000 bytes bring
        piece = leader.read_bytes(offset, 2000)
        cut = max(o for o in starts if o <= offset + len(piece))
        count = sum(c for o, _, c in batches if offset <= o < cut)
        assert follower.append(piece[: cut - offset], count) == offset
        offset = cut
    assert [s.base_offset for s in leader.segments] != [s.base_offset for s in follower.segments]
    check(follower, batches)
    leader.close()
    follower.close()
    again = open_log(tmp_path / "follower" / "t-0", recover=True, segment_bytes=5000)
    check(again, batches)
    again.close()


def test_a_new_log_ignores_a_stale_index_of_its_first_segment(tmp_path: Path) -> None:
    # Left by a crash between unlinking a segment and its index: the next log there
    # must not take its first message offset from it.
    directory = tmp_path / "t-0"
    plog = open_log(directory)
    plog.restart_at(0, message=500)
    plog.close()
    (directory / "00000000000000000000.log").unlink()
    fresh = open_log(directory)
    assert fresh.start_message == 0
    assert index_files(directory) == []  # the stale one is gone
    fill(fresh, 3)
    again = open_log(directory, recover=True)  # a kill -9 before any index was written
    assert again.start_message == 0
    assert again.end_message == fresh.end_message
    again.close()
    fresh.close()
