"""Reading a chunk: exactly its batches, big batches, bad boundaries, retention."""

from __future__ import annotations

import pytest

from hadoop_loader.boundaries import FetchBoundaryFinder
from hadoop_loader.errors import OffsetStateError, RetentionGapError
from hadoop_loader.fetching import read_chunk
from hadoop_loader.offsets import PartitionRange
from hadoop_loader.planning import Chunk, plan_partition
from tests.loader.fakes import FakeConsumer, FakePartitionLog


def make_log(n_batches=40, base=0):
    batches = [[b"m%05d-%03d" % (b, i) + b"x" * (i % 17) for i in range(1 + (b * 13) % 50)] for b in range(n_batches)]
    batches[7] = [b"y" * 5000] * 30  # one batch much larger than the fetch size
    return FakePartitionLog(batches, base_offset=base), batches


def values_of(consumer, chunk, fetch_bytes):
    return [v for bs in read_chunk(consumer, chunk, fetch_bytes) for b in bs for v in b.values]


@pytest.mark.parametrize("fetch_bytes", [64, 1000, 4096, 1 << 20])
def test_read_chunk_returns_exactly_the_chunks_messages(fetch_bytes):
    log, batches = make_log(base=1234)
    consumer = FakeConsumer({("t", 0): log})
    chunk = Chunk("t", 0, log.boundaries[3], log.boundaries[30])
    assert values_of(consumer, chunk, fetch_bytes) == [v for b in batches[3:30] for v in b]


def test_walk_and_read_cover_everything_once():
    log, batches = make_log(base=0)
    consumer = FakeConsumer({("t", 0): log})
    finder = FetchBoundaryFinder(consumer, step_bytes=700)
    chunks = plan_partition(PartitionRange("t", 0, 0, log.end), 2000, finder)
    assert len(chunks) > 5
    assert all(c.start in log.boundaries and c.end in log.boundaries for c in chunks)
    got = [v for c in chunks for v in values_of(consumer, c, 512)]
    assert got == [v for b in batches for v in b]
    assert finder.bytes_walked > 0


def test_chunk_end_that_is_not_a_boundary_is_refused():
    log, _ = make_log()
    consumer = FakeConsumer({("t", 0): log})
    with pytest.raises(OffsetStateError, match="boundary"):
        values_of(consumer, Chunk("t", 0, 0, log.boundaries[5] + 3), 1 << 20)


def test_start_that_is_not_a_boundary_is_refused():
    log, _ = make_log()
    consumer = FakeConsumer({("t", 0): log})
    with pytest.raises(OffsetStateError, match="batch boundar"):
        values_of(consumer, Chunk("t", 0, 5, log.boundaries[5]), 1 << 20)


def test_retention_after_planning_is_a_gap_error():
    log, _ = make_log()
    log.log_start = log.boundaries[10]
    consumer = FakeConsumer({("t", 0): log})
    with pytest.raises(RetentionGapError, match=r"t/0: offsets \[0, ") as info:
        values_of(consumer, Chunk("t", 0, 0, log.boundaries[20]), 1 << 20)
    assert info.value.gaps[0].end == log.boundaries[10]
