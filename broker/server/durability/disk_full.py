"""Produce requests refused because a partition's log dir is full: logged, counted,
and answered with a message that names the broker and the log dir.

A full disk refuses every produce to its partitions, possibly thousands a second, so
the log gets one line per partition per ``interval_s`` (saying how many refusals it
stands for), while the counter ``produce_disk_full_total{log_dir}`` counts each one.
Nothing here does IO; the clock is injectable for tests.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable

from broker.common.errors import DiskFullError
from broker.common.metrics import Labels
from broker.common.ratelimit import RateLimitedLog

log = logging.getLogger("logferry.broker")

REPORT_INTERVAL_S = 60.0
"""At most one log line per partition in this many seconds."""


class DiskFullReporter:
    """What the broker does when an append meets a full log dir."""

    def __init__(
        self,
        broker_id: int,
        counter: defaultdict[Labels, float],
        interval_s: float = REPORT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.broker_id = broker_id
        self.counter = counter
        self.limiter = RateLimitedLog(log, interval_s, "more refused since the last report", clock)

    def refused(self, topic: str, partition: int, error: DiskFullError) -> str:
        """Count and (rate-limited) log one refused message set; returns the message
        for the produce answer: ``disk full on broker N (log dir X): ...``."""
        self.counter[(("log_dir", error.log_dir),)] += 1
        self.limiter.log(
            logging.ERROR,
            "%s-%d: produce refused, %s; free space there "
            "(retention_hours, retention_bytes) or move partitions to another "
            "log dir",
            topic,
            partition,
            error,
            key=(topic, partition),
        )
        detail = str(error).removeprefix(f"log dir {error.log_dir} is full: ")
        return f"disk full on broker {self.broker_id} (log dir {error.log_dir}): {detail}"


__all__ = ["DiskFullReporter", "REPORT_INTERVAL_S"]
