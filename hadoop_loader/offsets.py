"""Offset specifications (``earliest``, ``latest``, JSON per partition) and ranges.

An offset is the paper's logical byte offset of a batch in its partition; a range
``[start, end)`` of a partition runs from one batch boundary to another. The data source
options ``startingOffsets``/``endingOffsets`` follow Spark's Kafka source: ``earliest``,
``latest``, or a JSON object ``{"topic": {"0": 1234, "1": -2}}`` where ``-2`` means
earliest and ``-1`` latest, and a partition left out takes the option's default.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from hadoop_loader.errors import Gap, LoaderConfigError, OffsetStateError, RetentionGapError

EARLIEST = -2
LATEST = -1


class PartitionRange(NamedTuple):
    """Offsets ``[start, end)`` of one topic-partition, both batch boundaries."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def bytes(self) -> int:
        """Log bytes in the range."""
        return self.end - self.start

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "start": self.start, "end": self.end}


@dataclass(frozen=True)
class OffsetSpec:
    """Where reading starts (or ends) for every partition of some topics."""

    default: int
    """EARLIEST or LATEST, for partitions not named in ``explicit``."""
    explicit: Mapping[str, Mapping[int, int]] = field(default_factory=dict)
    """topic -> partition -> offset (>= 0) or EARLIEST/LATEST."""

    def for_partition(self, topic: str, partition: int) -> int:
        """The offset, EARLIEST or LATEST asked for this partition."""
        return self.explicit.get(topic, {}).get(partition, self.default)

    def to_json(self) -> str:
        """The option text that parses back into this spec (defaults are lost)."""
        return json.dumps({t: {str(p): o for p, o in ps.items()} for t, ps in self.explicit.items()}, sort_keys=True)


def parse_offset_spec(text: str | None, option: str, default: int) -> OffsetSpec:
    """Parse ``earliest``, ``latest`` or a JSON object; errors name ``option``."""
    if text is None or text.strip() == "":
        return OffsetSpec(default)
    value = text.strip()
    if value.lower() == "earliest":
        return OffsetSpec(EARLIEST)
    if value.lower() == "latest":
        return OffsetSpec(LATEST)
    try:
        data = json.loads(value)
    except json.JSONDecodeError:
        raise LoaderConfigError(
            f"option {option} must be 'earliest', 'latest' or JSON like {{\"topic\": {{\"0\": 1234}}}}, got {text!r}"
        ) from None
    if not isinstance(data, dict):
        raise LoaderConfigError(f"option {option}: the JSON must be an object of topics")
    explicit: dict[str, dict[int, int]] = {}
    for topic, parts in data.items():
        if not isinstance(parts, dict):
            raise LoaderConfigError(f"option {option}: topic {topic!r} must map partitions to offsets")
        explicit[topic] = {}
        for p, offset in parts.items():
            try:
                partition = int(p)
            except ValueError:
                raise LoaderConfigError(
                    f"option {option}: partition {p!r} of topic {topic!r} is not a number"
                ) from None
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < EARLIEST:
                raise LoaderConfigError(
                    f"option {option}: offset of {topic}/{partition} must be "
                    f"an offset >= 0, -2 (earliest) or -1 (latest), "
                    f"got {offset!r}"
                )
            explicit[topic][partition] = offset
    return OffsetSpec(default, explicit)


def resolve(asked: int, log_start: int, log_end: int) -> int:
    """Turn EARLIEST/LATEST into an offset of a partition retaining ``[log_start, log_end)``."""
    if asked == EARLIEST:
        return log_start
    if asked == LATEST:
        return log_end
    return asked


def check_start(
    topic: str, partition: int, start: int, log_start: int, log_end: int, skip_gaps: bool
) -> tuple[int, Gap | None]:
    """Validate where reading starts against what the partition retains.

    Returns the start to use and the gap skipped, if any. A start before the first
    retained offset is a retention gap: raised as :class:`RetentionGapError` unless
    ``skip_gaps``, when reading starts at ``log_start`` and the gap is reported. A start
    beyond the visible end means the log lost data it had served (or this is not the
    cluster the offsets came from): always an error.
    """
    if start > log_end:
        raise OffsetStateError(
            f"{topic}/{partition}: starting offset {start} is beyond the partition's visible "
            f"end {log_end}; the log was truncated or these offsets belong to another "
            "cluster. Check the source cluster; to start over, set the offsets explicitly."
        )
    if start < log_start:
        gap = Gap(topic, partition, start, log_start)
        if not skip_gaps:
            raise RetentionGapError(
                f"retention gap: {gap.describe()} before they were read; rerun with "
                "on_retention_gap = 'skip' (option onRetentionGap=skip) to continue from "
                f"offset {log_start} and record the gap",
                [gap],
            )
        return log_start, gap
    return start, None


def offset_mover(landed: dict[str, dict[int, int]], first: int) -> Callable[[PartitionRange], bool]:
    """Whether committing a range changes the recorded offsets.

    A partition landed before moves when its end differs; a new one when it has data,
    or when new partitions start at ``latest`` (that starting point must be recorded, or
    the next run would start at the then latest and skip what came in between).
    """

    def moves(r: PartitionRange) -> bool:
        before = landed.get(r.topic, {}).get(r.partition)
        if before is None:
            return r.end > r.start or first == LATEST
        return before != r.end

    return moves
