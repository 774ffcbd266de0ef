"""Kafka clients against logferry's Kafka listener, side by side with the native client.

One broker (with ``[kafka] listen``) and ZooKeeper as separate processes on 127.0.0.1.
Each run produces N messages of 200 bytes into a fresh one-partition topic and reads
them back, with confluent-kafka (librdkafka: default linger, acks=1), kafka-python
(acks=1), and logferry's own Producer/SimpleConsumer; prints msgs/s, the median of
--runs runs, and the CPU time per message of the broker process and of the client (this
process, its librdkafka threads included): robust on a busy machine.
A last case per run produces with librdkafka in requests of 60 messages (the broker's cost
per request). Each run also prints ``run N: <case> <rate> msgs/s`` lines for
benchmarks/ab_compare.py.
Targets (issue 23): librdkafka producer >= 500,000 msgs/s, consumer >= 1,000,000 msgs/s.

    .venv/bin/python benchmarks/kafka_clients.py --messages 200000 --runs 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Consumer as RdConsumer  # noqa: E402
from confluent_kafka import Producer as RdProducer  # noqa: E402
from confluent_kafka import TopicPartition  # noqa: E402

from benchmarks.harness import LocalCluster, wait_for_last_flush  # noqa: E402
from broker.client import Admin, Producer, SimpleConsumer  # noqa: E402

VALUE = b"x" * 200
_TICK = os.sysconf("SC_CLK_TCK")
STREAMING: dict[str, float] = {}
"""Per case, the rate from the first message on, when the client's start-up is slow."""


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of process ``pid`` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


SMALL_BATCH = 60
"""Messages per produce request in the small-batch case: what Kafka's ``ProducerPerformance``
sends with the Java client's defaults (``batch.size`` 16 KiB, ``linger.ms`` 5) at its
rate here, so the broker's cost per request shows (docs/benchmarks.md)."""


def rd_produce(bootstrap: str, topic: str, n: int, batch: int | None = None) -> float:
    """librdkafka with its defaults, or with at most ``batch`` messages per request."""
    config = {"bootstrap.servers": bootstrap, "acks": 1, "queue.buffering.max.messages": 1_000_000}
    if batch is not None:
        config |= {"batch.num.messages": batch, "linger.ms": 5}
    producer = RdProducer(config)
    t0 = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                producer.produce(topic, VALUE, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(120) != 0:
        raise SystemExit("librdkafka producer did not deliver everything")
    return time.perf_counter() - t0


def rd_consume(bootstrap: str, topic: str, n: int) -> float:
    # fetch.queue.backoff.ms: once more than queued.min.messages (100,000) are queued,
    # librdkafka >= 2.3 postpones the partition's next fetch by this long, 1 s by
    # default, however soon the application drains its queue (CONFIGURATION.md: "may
    # need to be decreased if ... the application is experiencing long (~1s) delays
    # between messages"). Against Apache Kafka as here: a client timer, not the broker.
    consumer = RdConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench",
            "enable.auto.commit": False,
            "fetch.max.bytes": 8 << 20,
            "max.partition.fetch.bytes": 4 << 20,
            "fetch.queue.backoff.ms": 10,
        }
    )
    t0 = time.perf_counter()
    # An assign() before the client has the topic's metadata starts the partition's
    # offset query on librdkafka's 500 ms retry timer ("no current leader for
    # partition", debug=topic); asking for the metadata first (timed) avoids it.
    consumer.list_topics(topic, timeout=10)
    consumer.assign([TopicPartition(topic, 0, -2)])
    count = 0
    deadline = t0 + 300
    first: tuple[float, int] | None = None
    while count < n and time.perf_counter() < deadline:
        for msg in consumer.consume(10_000, 1.0):
            if msg.error() is None:
                count += 1
        if first is None and count:
            first = (time.perf_counter(), count)
    elapsed = time.perf_counter() - t0
    consumer.close()
    if count < n:
        raise SystemExit(f"librdkafka consumer read {count} of {n}")
    assert first is not None
    # "streaming": from the first message on, leaving the group's start-up out
    # (metadata, coordinator, ListOffsets, the first fetch).
    STREAMING["confluent-kafka consumer"] = (n - first[1]) / (t0 + elapsed - first[0])
    return elapsed


def kp_produce(bootstrap: str, topic: str, n: int) -> float:
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=bootstrap, acks=1, linger_ms=5, batch_size=256 * 1024, enable_idempotence=False
    )
    t0 = time.perf_counter()
    for _ in range(n):
        producer.send(topic, VALUE, partition=0)
    producer.flush(300)
    elapsed = time.perf_counter() - t0
    producer.close()
    return elapsed


def kp_consume(bootstrap: str, topic: str, n: int) -> float:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KpTopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=4 << 20,
        fetch_max_bytes=8 << 20,
    )
    consumer.assign([KpTopicPartition(topic, 0)])
    count = 0
    t0 = time.perf_counter()
    while count < n and time.perf_counter() - t0 < 300:
        for records in consumer.poll(1000, max_records=100_000).values():
            count += len(records)
    elapsed = time.perf_counter() - t0
    consumer.close()
    return elapsed


def native_produce(cluster: LocalCluster, topic: str, n: int) -> float:
    with Producer(brokers=cluster.bootstrap, acks=1) as producer:
        t0 = time.perf_counter()
        chunk = [VALUE] * 1000
        for _ in range(n // 1000):
            producer.send(topic, chunk, partition=0)
        producer.flush(120)
        return time.perf_counter() - t0


def native_consume(cluster: LocalCluster, topic: str, n: int) -> float:
    with SimpleConsumer(brokers=cluster.bootstrap, max_bytes=1 << 20) as consumer:
        t0 = time.perf_counter()
        count = 0
        for _ in consumer.messages(topic, 0, "earliest"):
            count += 1
        elapsed = time.perf_counter() - t0
    if count < n:
        raise SystemExit(f"native consumer read {count} of {n}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--no-kafka-python", action="store_true", help="skip kafka-python (slow: pure Python)")
    args = parser.parse_args()
    n = args.messages // 1000 * 1000
    results: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp, LocalCluster(Path(tmp), kafka={"listen": "127.0.0.1:0"}) as cluster:
        bootstrap = cluster.brokers[0].kafka_address()
        admin = Admin(brokers=cluster.bootstrap)
        clients: list[tuple[str, Callable[[str], float], Callable[[str], float]]] = [
            ("native", lambda t: native_produce(cluster, t, n), lambda t: native_consume(cluster, t, n)),
            ("confluent-kafka", lambda t: rd_produce(bootstrap, t, n), lambda t: rd_consume(bootstrap, t, n)),
        ]
        if not args.no_kafka_python:
            clients.append(
                ("kafka-python", lambda t: kp_produce(bootstrap, t, n), lambda t: kp_consume(bootstrap, t, n))
            )
        proc = cluster.brokers[0].proc
        assert proc is not None
        pid = proc.pid
        cpu: dict[str, list[float]] = {}

        def measure(case: str, run: int, action: Callable[[], float]) -> None:
            before, mine = cpu_seconds(pid), time.process_time()
            rate = n / action()
            used = cpu_seconds(pid) - before
            client = time.process_time() - mine
            results.setdefault(case, []).append(rate)
            cpu.setdefault(case, []).append(used / n * 1e6)
            print(
                f"run {run}: {case} {rate:,.0f} msgs/s (broker CPU "
                f"{used / n * 1e6:.2f} us/msg, client CPU {client / n * 1e6:.2f} us/msg)",
                flush=True,
            )
            if case in STREAMING:
                streaming = STREAMING.pop(case)
                results.setdefault(f"{case} streaming", []).append(streaming)
                cpu.setdefault(f"{case} streaming", []).append(used / n * 1e6)
                print(f"run {run}: {case} streaming {streaming:,.0f} msgs/s", flush=True)

        for run in range(args.runs):
            for name, produce, consume in clients:
                topic = f"bench-{name}-{run}"
                admin.create_topic(topic, partitions=1)
                measure(f"{name} producer", run, lambda produce=produce, topic=topic: produce(topic))
                with SimpleConsumer(brokers=cluster.bootstrap) as probe:
                    wait_for_last_flush(probe, topic)
                measure(f"{name} consumer", run, lambda consume=consume, topic=topic: consume(topic))
            topic = f"bench-small-batches-{run}"
            admin.create_topic(topic, partitions=1)
            measure(
                f"confluent-kafka producer, {SMALL_BATCH} per request",
                run,
                lambda topic=topic: rd_produce(bootstrap, topic, n, SMALL_BATCH),
            )
        admin.close()
    print(f"{n} messages of {len(VALUE)} B, one partition, median of {args.runs} runs (msgs/s, broker CPU us/msg):")
    for name, rates in results.items():
        print(f"  {name:<26} {statistics.median(rates):>12,.0f} {statistics.median(cpu[name]):>8.2f}")


if __name__ == "__main__":
    main()
