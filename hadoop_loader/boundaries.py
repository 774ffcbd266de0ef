"""Walking batch boundaries with fetch requests (the driver's side of planning).

:class:`FetchBoundaryFinder` implements :class:`hadoop_loader.planning.BoundaryFinder`
with :meth:`SimpleConsumer.fetch`: a fetch from a boundary returns whole batches only,
and its ``next_offset`` is the boundary after the last whole batch. Fetching
``max_bytes`` from ``start`` therefore lands on the last boundary within
``start + max_bytes``. The walk asks in steps of ``step_bytes`` so the driver never holds
more than one step in memory.

Cost: the walked bytes cross the network and are decoded once in the driver (about
5M messages/s on this machine) in addition to the executors' read. It is paid only for
partitions whose backlog is larger than one chunk or than the per-run cap. A broker
request answering "the last boundary at or before byte X" would make it free; until the
broker offers one, this is the honest way.
"""

from __future__ import annotations

from broker.client import MAX_BATCH_BYTES, FetchResult, SimpleConsumer
from hadoop_loader.errors import SourceError, source_errors


class FetchBoundaryFinder:
    """Finds boundaries by fetching whole batches and reading ``next_offset``."""

    def __init__(self, consumer: SimpleConsumer, step_bytes: int = 8 * 1024 * 1024):
        self.consumer = consumer
        self.step_bytes = step_bytes
        self.bytes_walked = 0
        """Log bytes fetched by the walk so far (reported in the job's summary)."""
        self.requests = 0

    def boundary_within(self, topic: str, partition: int, start: int, max_bytes: int) -> int:
        """The last boundary in ``(start, start + max_bytes]``, or the first batch's end.

        Fetches in steps of ``step_bytes``; a batch larger than the step is fetched with a
        growing limit (never past ``start + max_bytes``). When the batch at ``start`` is
        itself longer than ``max_bytes``, its end is returned: progress is guaranteed.
        """
        limit = start + max_bytes
        pos = start
        with source_errors(f"walking batch boundaries of {topic}/{partition} from {start}"):
            while pos < limit:
                want = min(self.step_bytes, limit - pos)
                while True:
                    result = self._fetch(topic, partition, pos, want)
                    if result.next_offset > pos or want >= limit - pos:
                        break
                    want = min(want * 4, limit - pos)  # a batch larger than the step
                if result.next_offset <= pos:
                    break  # the next batch does not fit before the limit (or the log ends)
                self.bytes_walked += result.next_offset - pos
                pos = result.next_offset
            if pos == start:
                pos = self._first_batch_end(topic, partition, start, max(max_bytes, 1024) * 2)
        return pos

    def _fetch(self, topic: str, partition: int, pos: int, want: int) -> FetchResult:
        self.requests += 1
        return self.consumer.fetch(topic, partition, pos, max_bytes=want)

    def _first_batch_end(self, topic: str, partition: int, start: int, want: int) -> int:
        """End of the batch at ``start``, larger than the limit: grow until it fits."""
        while True:
            result = self._fetch(topic, partition, start, want)
            if result.batches:
                end = result.batches[0].next_offset
                self.bytes_walked += end - start
                return end
            if start >= result.visible_end:
                raise SourceError(f"{topic}/{partition}: no batch at {start}, the visible end is {result.visible_end}")
            if want >= MAX_BATCH_BYTES + 64:
                raise SourceError(f"{topic}/{partition}: no whole batch at {start} within {want} bytes")
            want = min(want * 4, MAX_BATCH_BYTES + 64)
