"""Where the librdkafka consumer's time goes, on Apache Kafka and on logferry's Kafka
listener: the fetch rounds of benchmarks/vs_kafka.py's consumer case, taken apart.

Both brokers as benchmarks/vs_kafka.py starts them (its ``started_systems``), a topic of
N values of 200 bytes on each (librdkafka, acks=all, untimed), then ``--rounds`` reads
of it from the start, alternated (the system that goes first swapped every round), with
vs_kafka.py's consumer settings plus librdkafka's statistics every 100 ms. Per read:
the time from ``assign()`` to the first message and from there to the N-th (the rate
then), the Fetch requests librdkafka sent and the bytes it received (its ``req`` and
``rxbytes`` counters), the round trip it measured per request (``rtt``: from the
request's send to its answer's last byte, so the broker's work and the answer's transfer
both), the broker's CPU per Fetch and the client's (this process) per message. Prints
``run N: <system> consumer <rate> msgs/s`` lines and the medians.

    .venv/bin/python benchmarks/kafka_fetch_rounds.py --messages 500000 --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
for _path in (HERE, HERE.parent):  # the peers package lives next to this script; benchmarks.harness
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from confluent_kafka import Consumer, TopicPartition  # noqa: E402

from benchmarks.harness import run_main  # noqa: E402
from benchmarks.vs_kafka import (  # noqa: E402
    FAILURES,
    Side,
    cpu_seconds,
    produce,
    say,
    started_systems,
    unavailable_reason,
    wait_for_leader,  # noqa: E402
)


@dataclass
class Read:
    """One read of N values."""

    to_first: float
    """Seconds from assign() to the first message."""
    streaming: float
    """Seconds from the first message to the N-th."""
    fetches: int
    rx_bytes: int
    rtt_ms: float
    """librdkafka's round trip per request, averaged over its statistics windows."""
    broker_cpu: float
    client_cpu: float


def read(side: Side, topic: str, n: int, timeout: float) -> Read:
    """Read ``topic`` from its start until ``n`` values arrived, with vs_kafka.py's
    consumer settings and librdkafka's statistics."""
    windows: list[dict[str, object]] = []
    consumer = Consumer(
        {
            "bootstrap.servers": side.bootstrap,
            "group.id": "fetch-rounds",
            "enable.auto.commit": False,
            "fetch.max.bytes": 8 << 20,
            "max.partition.fetch.bytes": 4 << 20,
            "fetch.queue.backoff.ms": 10,
            "statistics.interval.ms": 100,
            "stats_cb": lambda text: windows.append(json.loads(text)),
        }
    )
    try:
        wait_for_leader(consumer, side, topic, timeout)
        windows.clear()
        broker0, client0 = side.broker_cpu(), cpu_seconds(os.getpid())
        t0 = time.perf_counter()
        give_up = t0 + timeout
        first, count = 0.0, 0
        consumer.assign([TopicPartition(topic, 0, -2)])
        while count < n and time.perf_counter() < give_up:
            for msg in consumer.consume(10_000, 0.5):
                if msg.error() is None:
                    count += 1
                    if count == 1:
                        first = time.perf_counter()
        done = time.perf_counter()
        broker_cpu, client_cpu = side.broker_cpu() - broker0, cpu_seconds(os.getpid()) - client0
        consumer.poll(0.2)  # one more statistics window, with the last fetch in it
    finally:
        consumer.close()
    if count != n:
        raise SystemExit(f"{side.name}: read {count} of {n}")
    fetches, rx, rtt = fetch_counters(windows)
    return Read(first - t0, done - first, fetches, rx, rtt, broker_cpu, client_cpu)


def fetch_counters(windows: list[dict[str, object]]) -> tuple[int, int, float]:
    """From librdkafka's statistics: Fetch requests and bytes received by the brokers
    it fetched from (the last window's totals) and the round trip per request (each
    window's average weighted by its sample count), in ms."""
    fetches = rx = 0
    weighted = samples = 0.0
    for window in windows:
        for broker in window.get("brokers", {}).values():  # type: ignore[attr-defined]
            rtt = broker.get("rtt", {})
            weighted += rtt.get("avg", 0) * rtt.get("cnt", 0)
            samples += rtt.get("cnt", 0)
    if windows:
        for broker in windows[-1].get("brokers", {}).values():  # type: ignore[attr-defined]
            fetches += broker.get("req", {}).get("Fetch", 0)
            rx += broker.get("rxbytes", 0)
    return fetches, rx, (weighted / samples / 1000 if samples else 0.0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=500_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    reason = unavailable_reason()
    if reason is not None:
        say(reason)
        return 0
    n = args.messages
    say(f"kafka_fetch_rounds: {n:,} values x {args.rounds} reads; load average {os.getloadavg()[0]:.2f}")
    results: dict[str, list[Read]] = {}

    def body() -> None:
        with tempfile.TemporaryDirectory(prefix="logferry-fetch-rounds-") as tmp, started_systems(Path(tmp)) as sides:
            for side in sides:
                side.create_topic("rounds")
                produce(side, "rounds", n, "all", 60 + n / 5_000)
            for number in range(1, args.rounds + 1):
                for side in sides if number % 2 else sides[::-1]:
                    got = read(side, "rounds", n, 60 + n / 5_000)
                    results.setdefault(side.name, []).append(got)
                    say(
                        f"run {number}: {side.name} consumer {n / (got.to_first + got.streaming):,.0f} msgs/s "
                        f"(first after {got.to_first * 1000:.0f} ms, then {n / got.streaming:,.0f} msgs/s; "
                        f"{got.fetches} fetches of {got.rx_bytes / max(got.fetches, 1) / 1e6:.2f} MB, rtt "
                        f"{got.rtt_ms:.1f} ms; broker CPU {got.broker_cpu / max(got.fetches, 1) * 1000:.2f} ms/fetch, "
                        f"client CPU {got.client_cpu / n * 1e6:.2f} us/msg)"
                    )
        med = statistics.median
        say("")
        say(
            "| system | msgs/s | to first, ms | first to N, msgs/s | fetches | MB per fetch | rtt, ms "
            "| broker CPU, ms/fetch | client CPU, us/msg |"
        )
        say("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for name, reads in results.items():
            say(
                f"| {name} | {med(n / (r.to_first + r.streaming) for r in reads):,.0f} "
                f"| {med(r.to_first for r in reads) * 1000:.0f} | {med(n / r.streaming for r in reads):,.0f} "
                f"| {med(r.fetches for r in reads):.0f} "
                f"| {med(r.rx_bytes / max(r.fetches, 1) for r in reads) / 1e6:.2f} "
                f"| {med(r.rtt_ms for r in reads):.1f} "
                f"| {med(r.broker_cpu / max(r.fetches, 1) for r in reads) * 1000:.2f} "
                f"| {med(r.client_cpu / n for r in reads) * 1e6:.2f} |"
            )
        say(f"load average at the end {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")

    return run_main(body, FAILURES, "every broker is stopped and its data deleted", say)


if __name__ == "__main__":
    sys.exit(main())
