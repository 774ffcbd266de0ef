"""Planning Spark input partitions: offset ranges cut into chunks at batch boundaries.

The problem: offsets are byte positions of batches and the brokers keep no index of
batch boundaries, so a reader cannot start at an arbitrary byte; it must start where a
batch starts. The only boundaries known without reading are a range's two ends (the
start comes from a previous run or the log start; the visible end is always a
boundary).

The plan: a range no larger than ``chunk_bytes`` (and inside the per-run cap) becomes
one chunk with no extra work. A larger range is *walked* by the driver: from a known
boundary it asks a :class:`BoundaryFinder` for the last boundary at most ``chunk_bytes``
ahead, which becomes the end of this chunk and the start of the next. The same walk cuts
a range at the per-run cap, so every chunk, and the end recorded in a manifest, is a
boundary. The walk is the only place that costs extra I/O, and only for backlogs larger
than one chunk; see :mod:`hadoop_loader.boundaries` for its cost.

This module is pure (no I/O): the finder is injected, so planning is unit tested with a
fake log.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple, Protocol

from hadoop_loader.offsets import PartitionRange


class Chunk(NamedTuple):
    """One Spark input partition: offsets ``[start, end)`` of a topic-partition.

    Both ends are batch boundaries, so an executor fetches from ``start`` and stops
    exactly at ``end``.
    """

    topic: str
    partition: int
    start: int
    end: int

    @property
    def bytes(self) -> int:
        return self.end - self.start

    def to_json(self) -> list[Any]:
        return [self.topic, self.partition, self.start, self.end]

    @classmethod
    def from_json(cls, value: list[Any]) -> Chunk:
        topic, partition, start, end = value
        return cls(str(topic), int(partition), int(start), int(end))


class BoundaryFinder(Protocol):
    """Finds batch boundaries ahead of a known one."""

    def boundary_within(self, topic: str, partition: int, start: int, max_bytes: int) -> int:
        """A batch boundary ``b`` with ``start < b <= start + max_bytes``, as far as it can.

        ``start`` is a boundary below the visible end. When the batch at ``start`` alone is
        longer than ``max_bytes``, returns that batch's end (progress is guaranteed).
        """
        ...


def plan_partition(
    r: PartitionRange, chunk_bytes: int, finder: BoundaryFinder, cap_bytes: int | None = None
) -> list[Chunk]:
    """Cut ``r`` into chunks of at most about ``chunk_bytes``, stopping near ``cap_bytes``.

    Chunks are contiguous: each starts where the previous one ends, the first at
    ``r.start``. Without a cap they cover the range exactly; with a cap they stop at the
    last boundary within ``r.start + cap_bytes`` (at least one batch).
    """
    if chunk_bytes <= 0:
        raise ValueError("chunk_bytes must be positive")
    stop = r.end if cap_bytes is None else min(r.end, r.start + cap_bytes)
    chunks: list[Chunk] = []
    pos = r.start
    while pos < stop:
        if r.end <= stop and r.end - pos <= chunk_bytes:
            end = r.end  # the visible end is a known boundary: no walk needed
        else:
            end = finder.boundary_within(r.topic, r.partition, pos, min(chunk_bytes, stop - pos))
            if end <= pos:
                raise ValueError(f"boundary finder went backwards at {r.topic}/{r.partition} offset {pos}")
            if end > stop and chunks:
                break  # the next batch would cross the cap: it waits for the next run
            end = min(end, r.end)
        chunks.append(Chunk(r.topic, r.partition, pos, end))
        pos = end
    return chunks


def plan(
    ranges: Iterable[PartitionRange], chunk_bytes: int, finder: BoundaryFinder, cap_bytes: int | None = None
) -> list[Chunk]:
    """Chunks of every non-empty range, in the order of ``ranges``."""
    chunks: list[Chunk] = []
    for r in ranges:
        if r.end > r.start:
            chunks.extend(plan_partition(r, chunk_bytes, finder, cap_bytes))
    return chunks


def pack(chunks: Iterable[Chunk], target_bytes: int) -> list[list[Chunk]]:
    """Group chunks into splits (one Spark task each) of up to about ``target_bytes``.

    A chunk cut from a large range is about ``target_bytes`` already and stays alone;
    the ranges of small partitions are packed together, in (topic, partition) order.
    Fewer, fuller tasks mean fewer output files: a task writes one file per event hour
    it touches, whether it read one partition or twenty.
    """
    splits: list[list[Chunk]] = []
    current: list[Chunk] = []
    size = 0
    for c in sorted(chunks, key=lambda c: (c.topic, c.partition, c.start)):
        if current and size + c.bytes > target_bytes:
            splits.append(current)
            current, size = [], 0
        current.append(c)
        size += c.bytes
    if current:
        splits.append(current)
    return splits


def ranges_of(chunks: Iterable[Chunk]) -> list[PartitionRange]:
    """Merge contiguous chunks back into one range per topic-partition.

    Raises ValueError if the chunks of a partition are not contiguous (a planning bug
    that would lose or duplicate data).
    """
    merged: dict[tuple[str, int], list[int]] = {}
    for c in sorted(chunks, key=lambda c: (c.topic, c.partition, c.start)):
        key = (c.topic, c.partition)
        if key in merged:
            if merged[key][1] != c.start:
                raise ValueError(
                    f"chunks of {c.topic}/{c.partition} are not contiguous at {merged[key][1]} / {c.start}"
                )
            merged[key][1] = c.end
        else:
            merged[key] = [c.start, c.end]
    return [PartitionRange(t, p, s, e) for (t, p), (s, e) in merged.items()]
