"""Rolling by age and retention: whole segments go from the start, by age or by size."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytest

from broker.common.errors import OffsetOutOfRangeError
from broker.storage.config import LogConfig
from broker.storage.partition_log import PartitionLog
from broker.storage.segment import now_ms
from broker.wire import records

HOUR = 3600 * 1000


def batch(i: int) -> bytes:
    return records.encode_batch([b"%d-" % i + b"x" * 40], None, 1000 + i)


def filled_log(tmp_path: Path, count: int = 12, **config: Any) -> PartitionLog:
    config.setdefault("segment_bytes", 200)
    plog = PartitionLog(tmp_path / "t-0", "t", 0, LogConfig(**config), recover=False)
    for i in range(count):
        plog.append(batch(i), 1)
    plog.flush()
    return plog


def age(path: Path, hours: float) -> None:
    """Make ``path`` look last modified ``hours`` ago."""
    when = (now_ms() - hours * HOUR) / 1000
    os.utime(path, (when, when))


def test_old_segments_are_deleted_from_the_start(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    plog = filled_log(tmp_path, retention_ms=10 * HOUR)
    segments = plog.segments
    assert len(segments) >= 4
    for seg in segments[:2]:
        age(seg.path, 11)
    age(segments[3].path, 11)  # older than retention but after a younger one: kept
    with caplog.at_level(logging.INFO, logger="logferry.storage"):
        deleted = plog.enforce_retention(now_ms())
    assert deleted == [s.path for s in segments[:2]]
    assert not any(p.exists() for p in deleted)
    assert plog.start_offset == segments[2].base_offset
    assert plog.segments == segments[2:]
    assert segments[0].path.name in caplog.text and "deleted segment" in caplog.text
    with pytest.raises(OffsetOutOfRangeError) as err:
        plog.read_slice(0, 100)
    assert err.value.start == segments[2].base_offset and err.value.end == plog.visible_end
    assert plog.read_slice(plog.start_offset, 100).count > 0
    assert plog.enforce_retention(now_ms()) == []
    plog.close()


def test_an_expired_active_segment_is_rolled_so_that_it_can_go(tmp_path: Path) -> None:
    plog = filled_log(tmp_path, count=3, retention_ms=HOUR, segment_bytes=1 << 20)
    end = plog.end_offset
    age(plog.segments[0].path, 2)
    deleted = plog.enforce_retention(now_ms())
    assert len(deleted) == 1
    assert len(plog.segments) == 1 and plog.segments[0].size == 0
    assert plog.start_offset == plog.visible_end == plog.end_offset == end
    assert plog.read_slice(end, 100).count == 0
    assert plog.append(batch(3), 1) == end  # offsets carry on; they never restart
    plog.close()


def test_retention_by_bytes_keeps_the_log_under_the_limit(tmp_path: Path) -> None:
    plog = filled_log(tmp_path, retention_bytes=450)
    total = plog.size_bytes
    assert total > 450
    deleted = plog.enforce_retention(now_ms())
    assert deleted and plog.size_bytes <= 450
    assert plog.size_bytes == plog.end_offset - plog.start_offset
    assert sum(s.size for s in plog.segments) == plog.size_bytes
    plog.close()


def test_retention_never_leaves_the_log_without_a_segment(tmp_path: Path) -> None:
    plog = filled_log(tmp_path, retention_bytes=0)
    plog.enforce_retention(now_ms())
    assert len(plog.segments) == 1 and plog.segments[0].size > 0  # the active one stays
    plog.close()


def test_a_compact_log_is_never_deleted_by_retention(tmp_path: Path) -> None:
    """cleanup_policy "compact" (Kafka's cleanup.policy): logferry never compacts, so
    such a log keeps every record, past both retention limits."""
    plog = filled_log(tmp_path, retention_ms=HOUR, retention_bytes=0, cleanup_policy="compact")
    segments = plog.segments
    for seg in segments:
        age(seg.path, 2)
    assert plog.enforce_retention(now_ms()) == []
    assert plog.segments == segments and plog.start_offset == 0
    plog.close()


def test_unlimited_retention_bytes_deletes_nothing(tmp_path: Path) -> None:
    plog = filled_log(tmp_path)
    assert plog.enforce_retention(now_ms()) == []
    plog.close()


def test_segments_roll_by_age(tmp_path: Path) -> None:
    plog = filled_log(tmp_path, count=2, segment_bytes=1 << 20, segment_ms=HOUR)
    active = plog.segments[-1]
    plog.maybe_roll(active.created_ms + HOUR)
    assert len(plog.segments) == 1
    plog.maybe_roll(active.created_ms + HOUR + 1)
    assert len(plog.segments) == 2 and plog.segments[-1].base_offset == plog.end_offset
    plog.maybe_roll(now_ms() + 2 * HOUR)  # an empty active segment never rolls
    assert len(plog.segments) == 2
    plog.append(batch(2), 1)
    plog.segments[-1].created_ms -= 2 * HOUR  # an append to an old segment rolls first
    offset = plog.append(batch(3), 1)
    assert plog.segments[-1].base_offset == offset and len(plog.segments) == 3
    plog.close()
