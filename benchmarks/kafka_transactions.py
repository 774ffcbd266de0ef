"""confluent-kafka's transactional producer against its idempotent one (issue 35: "a
transactional producer reaches at least 80% of an idempotent one").

One broker with a Kafka listener (``--brokers 3``: three, the topics and
``__transaction_state`` with replication factor 3), one partition, 200-byte values.
Cases: an idempotent
producer (acks=all), and a transactional one committing every 1,000 and every 100
messages. Each case's records are counted by a ``read_committed`` consumer afterwards:
a count other than what was sent fails the run. Prints ``run N: <case> <rate> msgs/s``
lines (for benchmarks/ab_compare.py), the medians of ``--runs`` runs, and per
transaction the client's time in its two steps: the flush of its data (librdkafka
adds the partition to the transaction, AddPartitionsToTxn, before the first batch) and
``commit_transaction`` (EndTxn: the coordinator's decision, markers, acks=all).

    .venv/bin/python benchmarks/kafka_transactions.py --messages 20000 --runs 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402

from benchmarks.harness import LocalCluster  # noqa: E402
from broker.client import Admin  # noqa: E402

VALUE = b"x" * 200
STEPS: dict[str, list[float]] = {}
"""Case -> per-transaction ms of flush and of commit_transaction, for the last run."""


def _send(producer: Producer, topic: str) -> None:
    while True:
        try:
            producer.produce(topic, VALUE, partition=0)
            return
        except BufferError:
            producer.poll(0.01)


def idempotent(bootstrap: str, topic: str, n: int, warmup: str) -> float:
    """Seconds to send ``n`` records with an idempotent producer and have them acked
    (its connection and producer id got before the clock starts, with one record to
    ``warmup``, as the transactional producer's ``init_transactions``)."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    producer.produce(warmup, VALUE, partition=0)
    producer.flush(30)
    t0 = time.perf_counter()
    for _ in range(n):
        _send(producer, topic)
    if producer.flush(120) != 0:
        raise SystemExit("idempotent producer did not deliver everything")
    return time.perf_counter() - t0


def transactional(bootstrap: str, topic: str, n: int, every: int, case: str) -> float:
    """Seconds to send ``n`` records in transactions of ``every``, each committed
    (``init_transactions`` before the clock starts, as a long-lived producer does once)."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-{topic}", "linger.ms": 5})
    producer.init_transactions(30)
    flush_ms: list[float] = []
    commit_ms: list[float] = []
    t0 = time.perf_counter()
    for _ in range(n // every):
        producer.begin_transaction()
        for _ in range(every):
            _send(producer, topic)
        t1 = time.perf_counter()
        if producer.flush(60) != 0:
            raise SystemExit("transactional producer did not deliver a transaction's records")
        t2 = time.perf_counter()
        producer.commit_transaction(60)
        t3 = time.perf_counter()
        flush_ms.append((t2 - t1) * 1000)
        commit_ms.append((t3 - t2) * 1000)
    elapsed = time.perf_counter() - t0
    STEPS[case] = [statistics.median(flush_ms), statistics.median(commit_ms)]
    return elapsed


def count_committed(bootstrap: str, topic: str, expect: int, limit_s: float = 60.0) -> int:
    """Records of ``topic`` a read_committed consumer reads up to the partition's last
    stable offset (its committed end), read again while fewer than ``expect`` (an
    acknowledged record becomes visible at the next flush, which a loaded machine may
    hold back a moment)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"count-{topic}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        _, end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, 0)])
        count, deadline = 0, time.monotonic() + limit_s
        while time.monotonic() < deadline:
            msgs = consumer.consume(10_000, 0.5)
            count += sum(1 for m in msgs if m.error() is None)
            position = consumer.position([TopicPartition(topic, 0)])[0].offset
            if position >= end:
                if count >= expect:
                    break
                _, end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        return count
    finally:
        consumer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--brokers", type=int, default=1, help="brokers; the topics get this replication factor")
    args = parser.parse_args()
    n = args.messages // 1000 * 1000
    cases = {
        "idempotent": None,
        "transactional every 1000": 1000,
        "transactional every 100": 100,
    }
    results: dict[str, list[float]] = {}
    steps: dict[str, list[list[float]]] = {}
    rf = args.brokers
    with (
        tempfile.TemporaryDirectory() as tmp,
        LocalCluster(Path(tmp), brokers=rf, kafka={"listen": "127.0.0.1:0"}) as cluster,
    ):
        bootstrap = ",".join(b.kafka_address() for b in cluster.brokers)
        admin = Admin(brokers=cluster.bootstrap)
        admin.create_topic("bench-warmup", partitions=1, replication_factor=rf)
        for run in range(args.runs):
            for case, every in cases.items():
                topic = f"bench-{case.replace(' ', '-')}-{run}"
                admin.create_topic(topic, partitions=1, replication_factor=rf)
                if every is None:
                    elapsed = idempotent(bootstrap, topic, n, "bench-warmup")
                else:
                    elapsed = transactional(bootstrap, topic, n, every, case)
                read = count_committed(bootstrap, topic, n)
                if read != n:
                    raise SystemExit(f"{case}: a read_committed consumer read {read} of {n} records")
                results.setdefault(case, []).append(n / elapsed)
                extra = ""
                if case in STEPS:
                    steps.setdefault(case, []).append(STEPS.pop(case))
                    flush, commit = steps[case][-1]
                    extra = f" (per transaction: flush {flush:.1f} ms, commit_transaction {commit:.1f} ms)"
                print(f"run {run}: {case} {n / elapsed:,.0f} msgs/s{extra}", flush=True)
        admin.close()
    base = statistics.median(results["idempotent"])
    print(
        f"{n} records of {len(VALUE)} B, one partition, {rf} broker(s) and replication factor, "
        f"median of {args.runs} runs:"
    )
    print(f"  {'case':<26} {'msgs/s':>10} {'vs idem.':>9} {'flush ms':>9} {'commit ms':>10}")
    for case, rates in results.items():
        rate = statistics.median(rates)
        flush = f"{statistics.median(s[0] for s in steps[case]):.1f}" if case in steps else "-"
        commit = f"{statistics.median(s[1] for s in steps[case]):.1f}" if case in steps else "-"
        print(f"  {case:<26} {rate:>10,.0f} {rate / base:>8.0%} {flush:>9} {commit:>10}")


if __name__ == "__main__":
    main()
