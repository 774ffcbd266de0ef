"""Crash recovery: junk written straight into segment files is found, cut and logged.

Modelled on Kafka's LogSegmentTest.testRecoveryWithCorruptMessage: real files, real
damage, then count what survived.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from broker.common.errors import StorageError
from broker.storage.config import LogConfig
from broker.storage.partition_log import PartitionLog
from broker.storage.segment import segment_file_name
from broker.wire import records


def batch(i: int, n: int = 3, size: int = 20) -> bytes:
    return records.encode_batch([b"%d-%d-" % (i, j) + b"x" * size for j in range(n)], None, 1000 + i)


def write_log(directory: Path, count: int, **config: int) -> tuple[list[bytes], PartitionLog]:
    plog = PartitionLog(directory, "t", 0, LogConfig(**config), recover=False)
    batches = [batch(i) for i in range(count)]
    for b in batches:
        plog.append(b, 3)
    plog.close()
    return batches, plog


def reopen(directory: Path, recover: bool = True, **config: int) -> PartitionLog:
    return PartitionLog(directory, "t", 0, LogConfig(**config), recover)


def contents(plog: PartitionLog) -> bytes:
    return b"".join(s.read(0, s.size) for s in plog.segments)


def damage(path: Path, data: bytes, at: int | None = None) -> None:
    with open(path, "r+b") as f:
        f.seek(0, os.SEEK_END) if at is None else f.seek(at)
        f.write(data)


@pytest.mark.parametrize(
    "junk, reason",
    [
        (batch(99)[:30], "torn batch"),
        (batch(99)[:10], "torn batch header"),
        (b"\x00" * 4096, "bad magic byte 0"),
        (b"\x00\x00\x01\x00\x01" + b"\x05" * 500, "malformed batch header"),
    ],
    ids=["half-batch", "half-header", "zeros", "garbage"],
)
def test_torn_or_garbage_tail_is_cut_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, junk: bytes, reason: str
) -> None:
    directory = tmp_path / "t-0"
    batches, _ = write_log(directory, 5)
    good = len(b"".join(batches))
    damage(directory / segment_file_name(0), junk)
    with caplog.at_level(logging.WARNING, logger="logferry.storage"):
        plog = reopen(directory)
    assert plog.end_offset == plog.visible_end == good
    assert contents(plog) == b"".join(batches)
    assert os.path.getsize(directory / segment_file_name(0)) == good
    [record] = [r for r in caplog.records if "truncated" in r.getMessage()]
    message = record.getMessage()
    for part in ("t-0", segment_file_name(0), f"at byte {good}", f"cutting {len(junk)} bytes", reason):
        assert part in message
    assert record.name == "logferry.storage"
    assert plog.append(batch(5), 3) == good  # appends continue where the good data ends
    plog.close()


def test_flipped_byte_cuts_that_batch_and_everything_after(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    directory = tmp_path / "t-0"
    batches, _ = write_log(directory, 6)
    bad_at = len(b"".join(batches[:3]))
    damage(directory / segment_file_name(0), b"\xff", at=bad_at + records.HEADER_SIZE + 5)
    with caplog.at_level(logging.WARNING, logger="logferry.storage"):
        plog = reopen(directory)
    assert plog.end_offset == bad_at
    assert contents(plog) == b"".join(batches[:3])
    assert "CRC mismatch" in caplog.text and f"at byte {bad_at}" in caplog.text
    assert plog.messages_appended == 9 and plog.avg_message_bytes == pytest.approx(bad_at / 9)
    plog.close()


def test_clean_open_does_not_scan(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    directory = tmp_path / "t-0"
    batches, _ = write_log(directory, 3)
    damage(directory / segment_file_name(0), b"junk")
    with caplog.at_level(logging.INFO, logger="logferry.storage"):
        plog = reopen(directory, recover=False)
    assert plog.end_offset == len(b"".join(batches)) + 4  # trusted as it is
    assert plog.avg_message_bytes is None
    # No CRC scan; only the message offset index notices that the file grew behind the
    # broker's back (its walk of batch headers stops at the junk).
    assert [r.getMessage() for r in caplog.records if "message offset" not in r.getMessage()] == []
    assert plog.end_message == 9
    plog.close()


def test_only_the_last_segment_is_scanned(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    batches, plog = write_log(directory, 12, segment_bytes=300)
    first, last = plog.segments[0], plog.segments[-1]
    damage(first.path, b"\xff", at=records.HEADER_SIZE + 5)  # old, flushed: not rescanned
    damage(last.path, b"junk")
    again = reopen(directory, segment_bytes=300)
    assert again.end_offset == len(b"".join(batches))
    again.close()


def test_empty_trailing_segment_is_dropped_after_a_crash(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    directory = tmp_path / "t-0"
    batches, _ = write_log(directory, 3)
    end = len(b"".join(batches))
    (directory / segment_file_name(end)).touch()  # rolled, then crashed before writing
    with caplog.at_level(logging.INFO, logger="logferry.storage"):
        plog = reopen(directory)
    assert [s.base_offset for s in plog.segments] == [0]
    assert plog.end_offset == end
    assert "removed empty trailing segment" in caplog.text
    assert sorted(p.name for p in directory.iterdir()) == ["00000000000000000000.index", segment_file_name(0)]
    plog.close()


def test_a_cut_that_empties_the_last_segment_checks_the_one_before(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    batches, plog = write_log(directory, 5, segment_bytes=250)  # two batches per segment
    previous, last = plog.segments[-2:]
    assert last.size == len(batches[-1])
    damage(last.path, b"\xff", at=records.HEADER_SIZE + 5)  # its only batch is corrupt
    damage(previous.path, b"\x00" * 3, at=previous.size - 3)  # the one before is torn
    again = reopen(directory, segment_bytes=250)
    assert again.end_offset == previous.end_offset - len(batches[-2])
    assert [s.base_offset for s in again.segments] == [s.base_offset for s in plog.segments[:-1]]
    assert contents(again) == b"".join(batches[:-2])
    again.close()


def test_a_break_between_segments_cuts_the_log_there(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    directory = tmp_path / "t-0"
    batches, plog = write_log(directory, 8, segment_bytes=300)
    segments = plog.segments
    assert len(segments) >= 3
    # The middle segment lost its unflushed end; the ones after it were never flushed.
    os.truncate(segments[1].path, segments[1].size - 10)
    with pytest.raises(StorageError, match="gap"):
        reopen(directory, recover=False, segment_bytes=300)
    with caplog.at_level(logging.WARNING, logger="logferry.storage"):
        again = reopen(directory, segment_bytes=300)
    kept = segments[1].end_offset - segments[1].base_offset
    assert [s.base_offset for s in again.segments] == [0, segments[1].base_offset]
    assert again.end_offset < segments[1].base_offset + kept
    assert contents(again) == b"".join(batches)[: again.end_offset]
    assert "gap" in caplog.text and segments[2].path.name in caplog.text
    again.close()
