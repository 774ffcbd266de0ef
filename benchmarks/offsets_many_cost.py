"""What one OFFSETS ``many`` answer costs the broker, with and without message offsets.

A dashboard (the console) asks each broker once a second for the ranges of every
partition it leads; since message offsets, each item also carries ``start_message`` and
``end_message`` (the high watermark in messages, ``PartitionLog.visible_end_message``).
At the log end that is a field read; below it (a leader waiting for its follower, an
unflushed tail) it is a walk of batch headers. This builds ``--partitions`` logs in a
temporary directory and times, per case, the items as the broker builds them (without
and with the message offsets, the median of ``--runs``):

- the visible end at the log end;
- the high watermark one batch behind, asked again without a move;
- the high watermark one batch behind a log that grows a batch between answers (the
  case under load).

    .venv/bin/python benchmarks/offsets_many_cost.py
    .venv/bin/python benchmarks/offsets_many_cost.py --partitions 1000 --runs 50
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from broker.storage.config import LogConfig  # noqa: E402
from broker.storage.partition_log import PartitionLog  # noqa: E402
from broker.wire.records import encode_batch  # noqa: E402


def batch(i: int) -> bytes:
    """Four 100-byte messages: a small producer batch, as at a few messages a second."""
    return encode_batch([b"x" * 100] * 4, None, 1_700_000_000_000 + i)


def without(logs: list[PartitionLog]) -> list[dict[str, Any]]:
    """The items before message offsets."""
    return [{"start": g.start_offset, "end": g.visible_end, "avg_message_bytes": g.avg_message_bytes} for g in logs]


def with_messages(logs: list[PartitionLog]) -> list[dict[str, Any]]:
    """The items now (broker/server/services/admin.py)."""
    return [
        {
            "start": g.start_offset,
            "end": g.visible_end,
            "avg_message_bytes": g.avg_message_bytes,
            "start_message": g.start_message,
            "end_message": g.visible_end_message,
        }
        for g in logs
    ]


def timed(
    fn: Callable[[list[PartitionLog]], Any], logs: list[PartitionLog], runs: int, before: Callable[[], None]
) -> float:
    """Median ms of ``fn(logs)`` over ``runs``, ``before()`` run untimed before each."""
    times = []
    for _ in range(runs):
        before()
        started = time.perf_counter()
        fn(logs)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=500)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--batches", type=int, default=60, help="batches per log before timing (~26 KB)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        logs = [PartitionLog(Path(d), "t", p, LogConfig(), recover=False) for p in range(args.partitions)]
        for g in logs:
            for i in range(args.batches):
                g.append(batch(i), 4)
            g.flush()
        grown = [args.batches]

        def nothing() -> None:
            pass

        def behind() -> None:
            for g in logs:
                g.set_high_watermark(g.batch_start_at_or_before(g.end_offset - 1))

        def grow() -> None:
            for g in logs:
                end = g.end_offset
                g.append(batch(grown[0]), 4)
                g.flush()
                g.set_high_watermark(end)
            grown[0] += 1

        print(f"{args.partitions} partition logs, one OFFSETS many answer for all of them, median of {args.runs}")
        for case, before in (
            ("visible end = log end", nothing),
            ("high watermark one batch behind, not moved", behind),
            ("high watermark one batch behind a growing log", grow),
        ):
            if before is behind:
                behind()
                before = nothing
            for fn in (without, with_messages):
                ms = timed(fn, logs, args.runs, before)
                name = "with message offsets" if fn is with_messages else "without"
                print(f"  {case}: {name}: {ms:.2f} ms ({ms / 10:.2f}% of a core at one answer a second)")
            for g in logs:
                g.set_high_watermark(None)
        for g in logs:
            g.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
