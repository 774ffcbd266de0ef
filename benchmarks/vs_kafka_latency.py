"""vs_kafka.py's latency case: end-to-end latency on Apache Kafka and on logferry, the
same librdkafka client on both, at fixed rates.

The measurement is benchmarks/e2e.py's (stamped messages at a fixed rate, a consumer in
its own process, the first second not counted, p50/p99/p99.9/max), with
benchmarks/peers/kafka_latency.py's client (producer linger 1 ms, acks=1; consumer by
``assign``). Each system states its rows (``Side.latency_variants``): Apache Kafka as it
ships (acknowledged and visible once in the page cache, no fsync); logferry with
``visibility = "written"`` (the same: visible once appended, fsynced behind the
consumers) and as it ships (visible after its group-commit fsync). Every run must
receive every message it sent (:func:`benchmarks.e2e.run_end_to_end` raises
otherwise): a miss fails the run. The systems alternate which goes first each round.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable
from typing import Protocol

from peers.base import PAYLOAD_SIZE, CaseFailed
from peers.kafka_latency import KafkaLatency

from benchmarks.e2e import PERCENTILES, run_end_to_end

LATENCY_RATES = (1_000, 10_000)
WARMUP_SECONDS = 3.0
"""Seconds of each row's untimed warm-up run."""
SLACK = 60.0
"""Seconds a latency run may take beyond its nominal duration."""

LatencyResults = dict[tuple[str, int], list[dict[str, float]]]
"""Percentiles (ms) per run, by (row name, msgs/s)."""


class LatencySide(Protocol):
    """What the latency case needs of a system under test (vs_kafka.Side)."""

    name: str
    bootstrap: str
    latency_variants: list[tuple[str, dict[str, str]]]

    def create_latency_topic(self, topic: str, config: dict[str, str]) -> None:
        """One partition, one replica, with ``config`` as the topic's own settings."""


def measure(
    side: LatencySide, row: str, config: dict[str, str], dest: str, rate: int, seconds: float
) -> dict[str, float]:
    """One run on a fresh topic ``dest``; its percentiles, or CaseFailed naming the row."""
    side.create_latency_topic(dest, config)
    client = KafkaLatency(side.bootstrap, acks="1")
    try:
        return run_end_to_end(client, dest, rate, seconds, PAYLOAD_SIZE, timeout=seconds + SLACK)
    except RuntimeError as exc:
        raise CaseFailed(f"{row} latency at {rate:,} msgs/s: {exc}") from None


def run_latency(
    sides: list[LatencySide],
    rates: list[int],
    seconds: float,
    rounds: int,
    report: Callable[[str], None],
    warmup: bool = True,
) -> LatencyResults:
    """``rounds`` runs of every rate on every row of every side, the first side swapped
    every round; each run on a fresh topic. ``warmup``: first an untimed run of
    :data:`WARMUP_SECONDS` per row at the lowest rate (a fresh Apache Kafka took 9 s
    to deliver the first messages of its first run, and 15 ms from its second)."""
    results: LatencyResults = {}
    if warmup:
        for side in sides:
            for n, (row, config) in enumerate(side.latency_variants):
                measure(side, row, config, f"latency-warmup-{_slug(side.name)}-{n}", min(rates), WARMUP_SECONDS)
    for number in range(1, rounds + 1):
        order = sides if number % 2 else sides[::-1]
        for rate in rates:
            for side in order:
                for row, config in side.latency_variants:
                    points = measure(side, row, config, f"latency-r{number}-{rate}-{_slug(row)}", rate, seconds)
                    results.setdefault((row, rate), []).append(points)
                    report(
                        f"run {number}: {row} {rate:,} msgs/s end-to-end "
                        + " ".join(f"{name} {points[name]:.2f}" for name, _ in PERCENTILES)
                        + f" ms (received {int(rate * seconds):,} of {int(rate * seconds):,})"
                    )
    return results


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def latency_table(results: LatencyResults, rounds: int) -> list[str]:
    """One row per system row and rate: the median of each percentile over the rounds."""
    lines = [
        f"end-to-end latency, ms, librdkafka (linger 1 ms, acks=1), median of {rounds} run(s)",
        "| system | msgs/s | " + " | ".join(name for name, _ in PERCENTILES) + " |",
        "|---|---:|" + "---:|" * len(PERCENTILES),
    ]
    for (row, rate), runs in sorted(results.items(), key=lambda item: (item[0][1], item[0][0])):
        cells = [f"{statistics.median(run[name] for run in runs):.2f}" for name, _ in PERCENTILES]
        lines.append(f"| {row} | {rate:,} | " + " | ".join(cells) + " |")
    return lines
