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

from broker.client import SimpleConsumer
from broker.records import MAX_BATCH_BYTES

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
        """A boundary in ``(start, start + max_bytes]``, as far as whole steps reach.

        A batch longer than ``step_bytes`` ends the walk early (a smaller chunk, still
        correct); a batch longer than ``max_bytes`` at ``start`` is returned whole.
        """
        limit = start + max_bytes
        pos = start
        with source_errors(f"walking batch boundaries of {topic}/{partition} from {start}"):
            while pos < limit:
                want = min(self.step_bytes, limit - pos)
                result = self.consumer.fetch(topic, partition, pos, max_bytes=want)
                self.requests += 1
                if result.next_offset <= pos:
                    break  # the next batch does not fit before the limit (or the log ends)
                self.bytes_walked += result.next_offset - pos
                pos = result.next_offset
            if pos == start:
                pos = self._first_batch_end(topic, partition, start)
        return pos

    def _first_batch_end(self, topic: str, partition: int, start: int) -> int:
        """End of a batch larger than the step: fetch with growing limits until it fits."""
        want = max(self.step_bytes, 1024 * 1024) * 2
        while True:
            result = self.consumer.fetch(topic, partition, start, max_bytes=want)
            self.requests += 1
            if result.next_offset > start:
                self.bytes_walked += result.next_offset - start
                return result.next_offset
            if start >= result.visible_end:
                raise SourceError(f"{topic}/{partition}: no batch at {start}, the visible end "
                                 f"is {result.visible_end}")
            if want >= MAX_BATCH_BYTES + 64:
                raise SourceError(f"{topic}/{partition}: no whole batch at {start} within "
                                 f"{want} bytes")
            want = min(want * 4, MAX_BATCH_BYTES + 64)
