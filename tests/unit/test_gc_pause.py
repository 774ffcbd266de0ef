"""Latency must not grow with the data a broker holds (issue 18): the storage keeps no
Python objects per batch, and the broker process freezes its startup objects so full
garbage collections stay short (broker.server.gc_pause)."""

from __future__ import annotations

import gc
from pathlib import Path

from broker.server.gc_pause import freeze_startup_objects
from broker.storage.config import LogConfig
from broker.storage.partition_log import PartitionLog
from broker.wire import records


def test_appending_and_flushing_batches_keeps_no_python_objects_per_batch(tmp_path: Path) -> None:
    plog = PartitionLog(tmp_path / "t-0", "t", 0, LogConfig(segment_bytes=64 * 1024), False)
    data = records.encode_batch([b"x" * 200], None, 1_000)

    def append(n: int) -> None:
        for _ in range(n):
            plog.append(data, 1)
        plog.flush()

    append(500)  # warm: caches, the first segment rolls
    gc.collect()
    before = len(gc.get_objects())
    append(5_000)  # about 1.2 MB: some 20 more segments (a few objects each)
    gc.collect()
    grown = len(gc.get_objects()) - before
    assert grown < 200, f"{grown} more tracked objects after 5,000 batches"
    offsets, offset = [], plog.start_offset
    while offset < plog.visible_end:  # every batch is still found by its offset
        piece = plog.read_slice(offset, 0)
        offsets.append(offset)
        offset += piece.count
    assert len(offsets) == 5_500 and offset == plog.end_offset
    plog.close()


def test_freeze_startup_objects_leaves_them_out_of_later_collections() -> None:
    assert gc.get_freeze_count() == 0
    gc.collect()  # what earlier tests left to collect is not "startup objects"
    before = len(gc.get_objects())
    try:
        frozen = freeze_startup_objects()
        after = len(gc.get_objects())
    finally:
        gc.unfreeze()  # the test runner's objects go back to being collected
    assert frozen > 0.9 * before > 1_000
    assert after < 0.1 * before
    assert gc.get_freeze_count() == 0
