"""A fake log for loader unit tests: real encoded batches behind a SimpleConsumer-like fetch."""

from __future__ import annotations

from broker.client import FetchResult
from broker.common.errors import InvalidOffsetError, OffsetOutOfRangeError
from broker.wire.records import decode_batches, encode_batch


class FakePartitionLog:
    """Batches of one partition, encoded exactly as the broker stores them."""

    def __init__(
        self, batches: list[list[bytes]], base_offset: int = 0, keys: bool = False, ts0: int = 1_700_000_000_000
    ):
        self.base = base_offset
        self.boundaries = [base_offset]
        parts = []
        t = ts0
        for values in batches:
            ks = [b"k%d" % i for i in range(len(values))] if keys else None
            stamps = [t + i for i in range(len(values))]
            t += len(values)
            parts.append(encode_batch(values, ks, stamps))
            self.boundaries.append(self.boundaries[-1] + len(parts[-1]))
        self.buf = b"".join(parts)
        self.log_start = base_offset

    @property
    def end(self) -> int:
        return self.boundaries[-1]


class FakeConsumer:
    """``fetch``/``offsets``/``partitions`` over FakePartitionLogs, like SimpleConsumer."""

    def __init__(self, logs: dict[tuple[str, int], FakePartitionLog]):
        self.logs = logs
        self.fetches = 0

    def partitions(self, topic):
        return sorted(p for t, p in self.logs if t == topic)

    def fetch(self, topic, partition, offset, max_bytes=None, max_wait_ms=0):
        self.fetches += 1
        log = self.logs[(topic, partition)]
        if offset < log.log_start or offset > log.end:
            error = OffsetOutOfRangeError(f"offset {offset} out of range")
            error.start, error.end = log.log_start, log.end
            raise error
        if offset not in log.boundaries:
            raise InvalidOffsetError(f"{offset} is not a batch boundary")
        rel = offset - log.base
        batches, used = decode_batches(log.buf[rel : rel + (max_bytes or 1 << 20)], offset)
        return FetchResult(batches, offset + used, log.end)
