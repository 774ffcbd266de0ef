"""Offset specs, retention checks and chunk planning against a fake log of batches."""

from __future__ import annotations

import bisect

import pytest

from hadoop_loader.errors import LoaderConfigError, OffsetStateError, RetentionGapError
from hadoop_loader.offsets import (
    EARLIEST,
    LATEST,
    PartitionRange,
    check_start,
    parse_offset_spec,
    resolve,
)
from hadoop_loader.planning import Chunk, pack, plan, plan_partition, ranges_of


class FakeLog:
    """Batch boundaries of one partition; answers like FetchBoundaryFinder."""

    def __init__(self, boundaries: list[int]):
        self.boundaries = boundaries
        self.calls = 0

    def boundary_within(self, topic, partition, start, max_bytes):
        self.calls += 1
        assert start in self.boundaries, f"{start} is not a boundary"
        i = bisect.bisect_right(self.boundaries, start + max_bytes) - 1
        if self.boundaries[i] <= start:
            return self.boundaries[self.boundaries.index(start) + 1]  # one big batch
        return self.boundaries[i]


def uneven_log(n: int = 200) -> list[int]:
    sizes = [(i * 7919) % 900 + 100 for i in range(n)]
    out = [1000]
    for s in sizes:
        out.append(out[-1] + s)
    return out


def test_parse_offset_spec():
    assert parse_offset_spec(None, "startingOffsets", EARLIEST).default == EARLIEST
    assert parse_offset_spec("latest", "startingOffsets", EARLIEST).default == LATEST
    spec = parse_offset_spec('{"a": {"0": 123, "2": -2}}', "startingOffsets", LATEST)
    assert spec.for_partition("a", 0) == 123
    assert spec.for_partition("a", 2) == EARLIEST
    assert spec.for_partition("a", 1) == LATEST
    assert spec.for_partition("b", 0) == LATEST


@pytest.mark.parametrize(
    "text", ["soon", "[1]", '{"a": [1]}', '{"a": {"x": 1}}', '{"a": {"0": -3}}', '{"a": {"0": "1"}}']
)
def test_bad_offset_specs_name_the_option(text):
    with pytest.raises(LoaderConfigError, match="startingOffsets"):
        parse_offset_spec(text, "startingOffsets", EARLIEST)


def test_resolve_and_check_start():
    assert resolve(EARLIEST, 10, 90) == 10
    assert resolve(LATEST, 10, 90) == 90
    assert resolve(42, 10, 90) == 42
    assert check_start("t", 0, 50, 10, 90, False) == (50, None)
    with pytest.raises(RetentionGapError, match=r"t/0: offsets \[5, 10\)") as info:
        check_start("t", 0, 5, 10, 90, False)
    assert info.value.gaps[0].bytes == 5
    start, gap = check_start("t", 0, 5, 10, 90, True)
    assert start == 10 and gap.start == 5 and gap.end == 10
    with pytest.raises(OffsetStateError, match="beyond the partition's visible end 90"):
        check_start("t", 0, 95, 10, 90, True)


def test_small_range_is_one_chunk_without_walking():
    log = FakeLog(uneven_log())
    r = PartitionRange("t", 3, log.boundaries[5], log.boundaries[9])
    assert plan_partition(r, 1 << 20, log) == [Chunk("t", 3, r.start, r.end)]
    assert log.calls == 0


@pytest.mark.parametrize("chunk_bytes", [100, 999, 1000, 5000, 33333])
def test_chunks_are_contiguous_boundaries_covering_the_range(chunk_bytes):
    log = FakeLog(uneven_log())
    r = PartitionRange("t", 0, log.boundaries[3], log.boundaries[-1])
    chunks = plan_partition(r, chunk_bytes, log)
    assert chunks[0].start == r.start and chunks[-1].end == r.end
    for a, b in zip(chunks, chunks[1:], strict=False):
        assert a.end == b.start
    for c in chunks:
        assert c.start in log.boundaries and c.end in log.boundaries
        # at most chunk_bytes, unless a single batch is larger
        next_boundary = log.boundaries[log.boundaries.index(c.start) + 1]
        assert c.bytes <= chunk_bytes or c.end == next_boundary
    assert ranges_of(chunks) == [r]


def test_cap_stops_at_a_boundary_and_always_makes_progress():
    log = FakeLog(uneven_log())
    r = PartitionRange("t", 0, log.boundaries[0], log.boundaries[-1])
    chunks = plan_partition(r, 2000, log, cap_bytes=10_000)
    end = chunks[-1].end
    assert end in log.boundaries and end - r.start <= 10_000
    # the next boundary would exceed the cap
    assert log.boundaries[log.boundaries.index(end) + 1] - r.start > 10_000
    tiny = plan_partition(r, 2000, log, cap_bytes=1)
    assert tiny == [Chunk("t", 0, log.boundaries[0], log.boundaries[1])]


def test_cap_larger_than_range_keeps_the_visible_end():
    log = FakeLog(uneven_log())
    r = PartitionRange("t", 0, log.boundaries[0], log.boundaries[4])
    assert plan_partition(r, 1 << 20, log, cap_bytes=1 << 30)[-1].end == r.end


def test_plan_skips_empty_ranges_and_ranges_of_detects_holes():
    log = FakeLog(uneven_log())
    ranges = [PartitionRange("t", 0, 1000, 1000), PartitionRange("t", 1, 1000, log.boundaries[3])]
    assert plan(ranges, 1 << 20, log) == [Chunk("t", 1, 1000, log.boundaries[3])]
    with pytest.raises(ValueError, match="not contiguous"):
        ranges_of([Chunk("t", 0, 0, 10), Chunk("t", 0, 20, 30)])


def test_chunk_json_round_trip():
    c = Chunk("t", 2, 10, 99)
    assert Chunk.from_json(c.to_json()) == c


def test_pack_groups_small_chunks_and_keeps_big_ones_alone():
    chunks = [
        Chunk("b", 0, 0, 100),
        Chunk("a", 1, 0, 30),
        Chunk("a", 0, 0, 30),
        Chunk("a", 2, 0, 30),
        Chunk("a", 3, 0, 30),
        Chunk("c", 0, 0, 500),
    ]
    splits = pack(chunks, 100)
    assert splits == [
        [Chunk("a", 0, 0, 30), Chunk("a", 1, 0, 30), Chunk("a", 2, 0, 30)],
        [Chunk("a", 3, 0, 30)],
        [Chunk("b", 0, 0, 100)],
        [Chunk("c", 0, 0, 500)],
    ]
    assert sorted(c for s in splits for c in s) == sorted(chunks)
    assert pack([], 100) == []
