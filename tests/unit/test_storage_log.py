"""PartitionLog: byte offsets, appends across segment rolls, flush visibility, fetch slices."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from broker.common.errors import (
    CorruptBatchError,
    InvalidOffsetError,
    OffsetOutOfRangeError,
    StorageError,
)
from broker.storage.config import LogConfig
from broker.storage.partition_log import PartitionLog
from broker.storage.segment import parse_segment_file_name, segment_file_name
from broker.wire import records


def batch(i: int, n: int = 3, ts: int = 1_000, size: int = 20) -> bytes:
    """A valid batch of ``n`` messages whose values identify batch ``i``."""
    return records.encode_batch([b"%d-%d-" % (i, j) + b"x" * size for j in range(n)], None, ts)


def open_log(tmp_path: Path, recover: bool = False, **config: int | str) -> PartitionLog:
    return PartitionLog(tmp_path / "t-0", "t", 0, LogConfig(**config), recover)


def read_all(plog: PartitionLog, offset: int, max_bytes: int = 1 << 20) -> bytes:
    """What a consumer fetching from ``offset`` up to the visible end would receive."""
    out = bytearray()
    while offset < plog.visible_end:
        piece = plog.read_slice(offset, max_bytes)
        data = os.pread(piece.file.fileno(), piece.count, piece.position)
        assert len(data) == piece.count > 0
        out += data
        offset += piece.count
    return bytes(out)


def test_segment_file_names_sort_like_offsets() -> None:
    assert segment_file_name(0) == "00000000000000000000.log"
    assert segment_file_name(1234) == "00000000000000001234.log"
    assert parse_segment_file_name(segment_file_name(2**63)) == 2**63
    for bad in ("0.log", "0000000000000000000a.log", "00000000000000000000.txt", "x"):
        assert parse_segment_file_name(bad) is None


def test_new_log_is_one_empty_segment(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    assert (plog.start_offset, plog.visible_end, plog.end_offset, plog.size_bytes) == (0, 0, 0, 0)
    assert [p.name for p in (tmp_path / "t-0").iterdir()] == [segment_file_name(0)]
    assert plog.avg_message_bytes is None
    piece = plog.read_slice(0, 100)
    assert piece.count == 0 and piece.offset == 0
    plog.close()


def test_offsets_are_byte_positions_across_rolls(tmp_path: Path) -> None:
    plog = open_log(tmp_path, segment_bytes=300)
    batches = [batch(i) for i in range(20)]
    offsets = [plog.append(b, 3) for b in batches]
    expected = 0
    for b, offset in zip(batches, offsets, strict=True):
        assert offset == expected
        expected += len(b)
    assert plog.end_offset == expected == sum(map(len, batches))
    # several segments, each named by the offset of its first byte, each within bounds
    segments = plog.segments
    assert len(segments) > 3
    assert [s.base_offset for s in segments] == [parse_segment_file_name(s.path.name) for s in segments]
    for seg, following in zip(segments, segments[1:], strict=False):
        assert seg.end_offset == following.base_offset
        assert 0 < seg.size <= 300
        assert seg.base_offset in offsets
    plog.flush()
    assert read_all(plog, 0) == b"".join(batches)
    assert plog.avg_message_bytes == pytest.approx(expected / 60)
    plog.close()


def test_read_slice_at_every_batch_boundary(tmp_path: Path) -> None:
    plog = open_log(tmp_path, segment_bytes=250)
    batches = [batch(i, n=1 + i % 4) for i in range(15)]
    offsets = [plog.append(b, 1 + i % 4) for i, b in enumerate(batches)]
    plog.flush()
    bases = {s.base_offset for s in plog.segments}
    for i, offset in enumerate(offsets):
        piece = plog.read_slice(offset, 1)  # smaller than a batch: still one whole batch
        assert piece.offset == offset and piece.count == len(batches[i])
        assert os.pread(piece.file.fileno(), piece.count, piece.position) == batches[i]
        big = plog.read_slice(offset, 1 << 20)
        seg = next(s for s in plog.segments if s.base_offset <= offset < s.end_offset)
        assert big.count == seg.end_offset - offset  # never crosses a segment boundary
        if offset in bases:  # an offset equal to a segment's end is the next segment's
            assert big.position == 0
        decoded, used = records.decode_batches(os.pread(big.file.fileno(), big.count, big.position), offset)
        assert used == big.count and decoded[0].offset == offset
    assert plog.read_slice(plog.visible_end, 100).count == 0
    plog.close()


def test_read_slice_count_respects_max_bytes_and_whole_first_batch(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    first, second = batch(0, size=500), batch(1)
    plog.append(first, 3)
    plog.append(second, 3)
    plog.flush()
    assert plog.read_slice(0, 10).count == len(first)
    assert plog.read_slice(0, len(first) + 5).count == len(first) + 5
    assert plog.read_slice(0, 1 << 20).count == len(first) + len(second)
    plog.close()


def test_mid_batch_offsets_are_invalid(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    b = batch(0, size=100)
    plog.append(b, 3)
    plog.append(batch(1), 3)
    plog.flush()
    for offset in (1, 4, 5, records.HEADER_SIZE, len(b) - 1, len(b) + 3):
        with pytest.raises((InvalidOffsetError, CorruptBatchError)) as err:
            plog.read_slice(offset, 1000)
        assert str(offset) in str(err.value)
    with pytest.raises(InvalidOffsetError, match="offset 1 is not the start of a batch"):
        plog.read_slice(1, 1000)
    plog.close()


def test_out_of_range_offsets_state_the_range(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    end = len(batch(0))
    plog.append(batch(0), 3)
    plog.flush()
    for offset in (-1, end + 1, 10**12):
        with pytest.raises(OffsetOutOfRangeError) as err:
            plog.read_slice(offset, 100)
        assert (err.value.start, err.value.end) == (0, end)
        assert f"[0, {end}]" in str(err.value)
    plog.close()


def test_visible_end_moves_only_when_flushed(tmp_path: Path) -> None:
    plog = open_log(tmp_path, flush_messages=5, flush_ms=1000)
    first = plog.append(batch(0), 3)
    second = plog.append(batch(1), 3)
    assert plog.visible_end == 0 and plog.end_offset == second + len(batch(1))
    # Inside the log but past the visible end: nothing to read yet (not an error, so
    # a consumer that moved to a new leader whose watermark lags simply waits).
    assert plog.read_slice(second, 100).count == 0
    assert plog.read_slice(first, 100).count == 0  # the visible end: nothing yet
    # A follower reads up to the log end.
    assert plog.read_slice(first, 10**6, upto=plog.end_offset).count == plog.end_offset
    assert plog.unflushed_messages == 6 and plog.flush_due(0)
    pending = plog.prepare_flush()
    assert plog.unflushed_messages == 0 and not plog.flush_due(10**15)
    third = plog.append(batch(2), 1)  # appended while the fsync runs
    pending.run()
    plog.mark_flushed(pending.end)
    assert plog.visible_end == third
    assert plog.read_slice(second, 1 << 20).count == len(batch(1))
    plog.mark_flushed(0)  # an older flush finishing late never moves it back
    assert plog.visible_end == third
    plog.flush()
    assert plog.visible_end == plog.end_offset
    plog.close()


def test_flush_due_by_count_and_by_age(tmp_path: Path) -> None:
    plog = open_log(tmp_path, flush_messages=10, flush_ms=200)
    assert not plog.flush_due(10**15)
    plog.append(batch(0, n=4), 4)
    appended_at = plog._oldest_unflushed_ms
    assert not plog.flush_due(appended_at + 199)
    assert plog.flush_due(appended_at + 200)
    plog.append(batch(1, n=6), 6)
    assert plog.flush_due(appended_at)
    plog.close()


def test_flush_runs_in_another_thread_across_a_roll(tmp_path: Path) -> None:
    plog = open_log(tmp_path, segment_bytes=200)
    for i in range(6):
        plog.append(batch(i), 3)
    pending = plog.prepare_flush()
    assert all(not s.writable for s in plog.segments[:-1])  # rolled segments sealed
    worker = threading.Thread(target=pending.run)
    worker.start()
    worker.join()
    plog.mark_flushed(pending.end)
    assert read_all(plog, 0) == b"".join(batch(i) for i in range(6))
    plog.close()


def test_append_failure_cuts_back_and_raises_storage_error(tmp_path: Path) -> None:
    resource = pytest.importorskip("resource")
    plog = open_log(tmp_path)
    plog.append(batch(0), 3)
    good_end = plog.end_offset
    big = batch(1, size=5000)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    # A file size limit makes the kernel write part of the batch, then fail (EFBIG):
    # the same partial-write-then-error path as a disk filling up.
    resource.setrlimit(resource.RLIMIT_FSIZE, (good_end + 1000, hard))
    try:
        with pytest.raises(StorageError) as err:
            plog.append(big, 3)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert "t-0" in str(err.value) and segment_file_name(0) in str(err.value)
    assert plog.end_offset == good_end
    assert os.path.getsize(plog.segments[-1].path) == good_end
    assert plog.append(batch(2), 3) == good_end  # the log carries on
    plog.flush()
    assert read_all(plog, 0) == batch(0) + batch(2)
    plog.close()


def test_offset_for_time(tmp_path: Path) -> None:
    plog = open_log(tmp_path, segment_bytes=400)
    offsets = [plog.append(batch(i, ts=1000 + 100 * i), 3) for i in range(30)]
    assert len(plog.segments) > 3
    assert plog.offset_for_time(5000) == 0  # nothing visible yet
    plog.flush()
    assert plog.offset_for_time(0) == 0
    assert plog.offset_for_time(999) == 0
    assert plog.offset_for_time(1000) == offsets[0]
    for i in range(29):
        assert plog.offset_for_time(1000 + 100 * i) == offsets[i]
        assert plog.offset_for_time(1000 + 100 * i + 50) == offsets[i]
    # after the last batch's first timestamp: still the last batch, whose later messages
    # may be stamped after ts (the header has only the first timestamp)
    assert plog.offset_for_time(1000 + 100 * 29 + 1) == offsets[29]
    assert plog.offset_for_time(10**13) == offsets[29]
    plog.close()


def test_offset_for_time_walks_past_chunk_boundaries(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    offsets = [plog.append(batch(i, ts=i, size=30_000), 3) for i in range(80)]  # ~7 MiB
    plog.flush()
    for i in (0, 33, 34, 35, 36, 70, 78):
        assert plog.offset_for_time(i) == offsets[i]
    plog.close()


def test_close_flushes_and_reopen_sees_everything(tmp_path: Path) -> None:
    plog = open_log(tmp_path, segment_bytes=300)
    data = b"".join(batch(i) for i in range(10))
    for i in range(10):
        plog.append(batch(i), 3)
    plog.close()
    again = open_log(tmp_path, segment_bytes=300)
    assert again.visible_end == again.end_offset == len(data)
    assert read_all(again, 0) == data
    assert again.append(batch(10), 3) == len(data)
    again.close()


def test_delete_removes_the_directory_but_open_slices_still_read(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    plog.append(batch(0), 3)
    plog.flush()
    piece = plog.read_slice(0, 100)
    plog.delete()
    assert not (tmp_path / "t-0").exists() and list(tmp_path.iterdir()) == []
    assert os.pread(piece.file.fileno(), piece.count, piece.position) == batch(0)


# -- what replication needs: a capped visible end, truncation, byte comparison ---------


def test_high_watermark_caps_the_visible_end(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    first = len(batch(0))
    plog.append(batch(0), 3)
    plog.append(batch(1), 3)
    plog.flush()
    plog.set_high_watermark(first)
    assert plog.visible_end == first and plog.flushed_end == plog.end_offset
    assert plog.read_slice(first, 1 << 20).count == 0  # past the watermark: nothing yet
    assert read_all(plog, 0) == batch(0)
    plog.set_high_watermark(None)
    assert plog.visible_end == plog.end_offset
    plog.close()


def test_truncate_to_cuts_inside_and_across_segments(tmp_path: Path) -> None:
    one = len(batch(0))
    plog = open_log(tmp_path, segment_bytes=2 * one)
    for i in range(5):  # segments of two batches: [0,1] [2,3] [4]
        plog.append(batch(i), 3)
    plog.flush()
    assert len(plog.segments) == 3
    assert plog.truncate_to(3 * one) == 2 * one
    assert plog.end_offset == 3 * one and len(plog.segments) == 2
    assert read_all(plog, 0) == b"".join(batch(i) for i in range(3))
    assert plog.append(batch(9), 3) == 3 * one  # appends go on from the cut
    plog.close()
    reopened = open_log(tmp_path, recover=True, segment_bytes=2 * one)
    assert read_all(reopened, 0) == b"".join(batch(i) for i in (0, 1, 2, 9))
    assert reopened.truncate_to(10 * one) == 0  # past the end: nothing to cut
    reopened.close()


def test_truncate_to_the_start_leaves_an_empty_log_there(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    plog.append(batch(0), 3)
    plog.set_high_watermark(len(batch(0)))
    plog.truncate_to(0)
    assert (plog.start_offset, plog.visible_end, plog.end_offset) == (0, 0, 0)
    assert plog.append(batch(1), 3) == 0
    plog.close()


def test_restart_at_drops_everything_and_continues_at_the_offset(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    plog.append(batch(0), 3)
    plog.restart_at(5000)
    assert (plog.start_offset, plog.end_offset) == (5000, 5000)
    assert plog.append(batch(1), 3) == 5000
    assert [parse_segment_file_name(p.name) for p in sorted(plog.directory.glob("*.log"))] == [5000]
    plog.close()


def test_batch_boundaries_and_raw_reads(tmp_path: Path) -> None:
    one, two = len(batch(0)), len(batch(1, n=7))
    plog = open_log(tmp_path)
    plog.append(batch(0), 3)
    plog.append(batch(1, n=7), 7)
    assert plog.batch_start_at_or_before(0) == 0
    assert plog.batch_start_at_or_before(one - 1) == 0
    assert plog.batch_start_at_or_before(one) == one
    assert plog.batch_start_at_or_before(one + 5) == one
    assert plog.batch_start_at_or_before(10**9) == one + two
    assert plog.read_bytes(one, 10**6) == batch(1, n=7)
    assert plog.read_bytes(one + two, 10) == b""
    plog.close()


def test_the_topic_id_is_kept_beside_the_segments_and_survives_a_reopen(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    assert plog.topic_id is None  # not recorded yet
    plog.append(batch(0), 3)
    plog.set_topic_id(4294967302)
    plog.flush()
    plog.close()
    reopened = open_log(tmp_path, recover=True)
    assert reopened.topic_id == 4294967302
    assert reopened.end_offset == len(batch(0))  # the file is no segment
    reopened.set_topic_id(7)
    assert reopened.topic_id == 7
    reopened.close()


def test_written_visibility_shows_appends_at_once_and_the_flush_still_follows(tmp_path):
    plog = open_log(tmp_path, visibility="written")
    first, second = batch(1), batch(2)
    plog.append(first, 3)
    plog.append(second, 3)
    assert plog.visible_on_write
    assert plog.visible_end == plog.end_offset == len(first) + len(second)
    assert plog.flushed_end == 0  # not durable yet: only visible
    assert read_all(plog, 0) == first + second
    plog.set_high_watermark(len(first))  # replicated: the in-sync replicas still cap it
    assert plog.visible_end == len(first)
    plog.set_high_watermark(None)
    plog.flush()
    assert plog.flushed_end == plog.end_offset
    plog.close()


def test_visibility_follows_a_config_change_without_reopening(tmp_path):
    plog = open_log(tmp_path)
    plog.append(batch(1), 3)
    assert plog.visible_end == 0 and not plog.visible_on_write  # flushed: the default
    plog.config = LogConfig(visibility="written")
    assert plog.visible_end == plog.end_offset == plog.publishable_end
    plog.config = LogConfig()
    assert plog.visible_end == plog.publishable_end == 0
    plog.close()
