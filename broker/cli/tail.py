"""``consume --from -N`` / ``--tail N``: where the last N messages of a partition start.

Offsets are byte offsets of batches, so "N messages before the end" cannot be computed;
it is found by reading. A candidate batch boundary is taken from the broker's time
index (``offset_for_time``) a window before now; the messages from there to the visible
end are counted, and the window doubles until there are at least N or the candidate is
the partition's first offset. The answer is that boundary plus how many messages to
skip after it. Reading is bounded by the data newer than the window, and stays correct
when producer timestamps are out of order (every candidate is a real boundary).
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple


class Last(NamedTuple):
    """``--from -N`` / ``--tail N``: start at the last ``messages`` messages of each partition."""

    messages: int
    """How many (not ``count``: that name is tuple's own method)."""


class TailStart(NamedTuple):
    """Where to read from to get the last messages of one partition."""

    offset: int
    """A batch boundary at or before the first wanted message."""
    skip: int
    """How many messages after ``offset`` come before the first wanted one."""


_FIRST_WINDOW_MS = 60_000


def count_messages(consumer: Any, topic: str, partition: int, offset: int, end: int) -> int:
    """How many messages lie between the batch boundary ``offset`` and ``end``."""
    count = 0
    while offset < end:
        result = consumer.fetch(topic, partition, offset, max_wait_ms=0)
        if not result.batches:
            break
        count += sum(len(batch.values) for batch in result.batches)
        offset = result.next_offset
    return count


def tail_start(consumer: Any, topic: str, partition: int, last: int, now_ms: int | None = None) -> TailStart:
    """The start of the last ``last`` messages of the partition (all of them if fewer)."""
    bounds = consumer.offsets(topic, partition)
    if last <= 0 or bounds.start >= bounds.end:
        return TailStart(bounds.end, 0)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    window = _FIRST_WINDOW_MS
    while True:
        ts = now - window
        candidate = (
            bounds.start
            if ts <= 0
            else max(bounds.start, min(consumer.offset_for_time(topic, partition, ts), bounds.end))
        )
        count = count_messages(consumer, topic, partition, candidate, bounds.end)
        if count >= last or candidate <= bounds.start:
            return TailStart(candidate, max(0, count - last))
        window *= 4


__all__ = ["Last", "TailStart", "count_messages", "tail_start"]
