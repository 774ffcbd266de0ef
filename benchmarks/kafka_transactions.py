"""confluent-kafka's transactional producer against its idempotent one (issue 35: "a
transactional producer reaches at least 80% of an idempotent one"), on logferry and on
Apache Kafka side by side in one run.

One broker per system (``--brokers 3``: three, the topics and the transaction state
with replication factor 3): logferry with its Kafka listener and ZooKeeper
(benchmarks/harness.py), Apache Kafka 4.4 KRaft nodes (benchmarks/peers/apache_kafka.py,
its defaults; ``--targets`` picks, both by default, Kafka skipped with one line when its
jars are missing). One partition, 200-byte values, the same client and settings on both.
Cases: an idempotent producer (acks=all), and a transactional one committing every
1,000 and every 100 messages. Each case's records are counted by a ``read_committed``
consumer afterwards: a count other than what was sent fails the run. The systems
alternate which goes first, round by round. Prints ``run N: <system> <case> <rate>
msgs/s`` lines (for benchmarks/ab_compare.py), the medians of ``--runs`` runs with
each case's rate against the same system's idempotent one (the median of the
per-round ratios beside it), the brokers' CPU per message, and per transaction the
client's time in its two steps: the flush of its data (librdkafka adds the partition
to the transaction, AddPartitionsToTxn, before the first batch) and
``commit_transaction`` (EndTxn: the coordinator's decision, acks=all; the markers
follow it on logferry, as on Kafka).

``--messages`` chooses what the idempotent case measures: up to librdkafka's
``queue.buffering.max.messages`` (100,000) the queue holds the whole run, so its
``produce()`` calls never wait for the broker until the final flush (a burst of 0.1-0.3
s here); above it the queue fills and the producer runs at its steady rate. The
transactional producer's rate is a steady one at any size (its round trips per
transaction pace it). docs/kafka.md, "Performance", has what that does to the ratio.

    .venv/bin/python benchmarks/kafka_transactions.py --messages 20000 --runs 5
    .venv/bin/python benchmarks/kafka_transactions.py --targets logferry --messages 20000 --runs 3
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
for _path in (HERE, HERE.parent):  # the peers package lives next to this script; benchmarks.harness
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from peers.apache_kafka import ApacheKafka  # noqa: E402
from peers.apache_kafka import unavailable_reason as kafka_unavailable  # noqa: E402

from benchmarks.harness import LocalCluster, run_main  # noqa: E402
from benchmarks.paper_experiment import deferred_signals  # noqa: E402
from benchmarks.vs_kafka import cpu_seconds  # noqa: E402
from broker.client import Admin  # noqa: E402

VALUE = b"x" * 200
IDEMPOTENT = "idempotent"
CASES: dict[str, int | None] = {IDEMPOTENT: None, "transactional every 1000": 1000, "transactional every 100": 100}
"""Case -> records per transaction (None: the idempotent producer)."""
TARGETS = ("logferry", "kafka")
WARMUP_TOPIC = "bench-warmup"


@dataclass
class Target:
    """One system: where its Kafka clients connect, how a topic is made, its brokers."""

    name: str
    bootstrap: str
    create_topic: Callable[[str], None]
    """Make a one-partition topic of the run's replication factor."""
    pids: list[int]


@dataclass
class Outcome:
    """One case's run on one system."""

    rate: float
    broker_cpu_us: float
    """The brokers' CPU per record, in microseconds."""
    steps: tuple[float, float] | None
    """Median ms per transaction of flush and of commit_transaction (None: idempotent)."""


def _send(producer: Producer, topic: str) -> None:
    while True:
        try:
            producer.produce(topic, VALUE, partition=0)
            return
        except BufferError:
            producer.poll(0.01)


def idempotent(bootstrap: str, topic: str, n: int) -> float:
    """Seconds to send ``n`` records with an idempotent producer and have them acked
    (its connection and producer id got before the clock starts, with one record to
    the warm-up topic, as the transactional producer's ``init_transactions``)."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    producer.produce(WARMUP_TOPIC, VALUE, partition=0)
    producer.flush(30)
    t0 = time.perf_counter()
    for _ in range(n):
        _send(producer, topic)
    if producer.flush(120) != 0:
        raise SystemExit("idempotent producer did not deliver everything")
    return time.perf_counter() - t0


def transactional(bootstrap: str, topic: str, n: int, every: int) -> tuple[float, tuple[float, float]]:
    """Seconds to send ``n`` records in transactions of ``every``, each committed
    (``init_transactions`` before the clock starts, as a long-lived producer does once),
    and the median ms per transaction of its flush and of ``commit_transaction``."""
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
    return elapsed, (statistics.median(flush_ms), statistics.median(commit_ms))


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


def run_case(target: Target, case: str, topic: str, n: int) -> Outcome:
    """One case on one system, counted afterwards."""
    target.create_topic(topic)
    every = CASES[case]
    before = sum(cpu_seconds(pid) for pid in target.pids)
    steps = None
    if every is None:
        elapsed = idempotent(target.bootstrap, topic, n)
    else:
        elapsed, steps = transactional(target.bootstrap, topic, n, every)
    cpu = sum(cpu_seconds(pid) for pid in target.pids) - before
    read = count_committed(target.bootstrap, topic, n)
    if read != n:
        raise SystemExit(f"{target.name} {case}: a read_committed consumer read {read} of {n} records")
    return Outcome(n / elapsed, cpu / n * 1e6, steps)


@contextlib.contextmanager
def started(names: list[str], workdir: Path, brokers: int) -> Iterator[list[Target]]:
    """The systems named, each with ``brokers`` brokers and a warm-up topic; all
    stopped on the way out, also on Ctrl-C."""
    stack = contextlib.ExitStack()
    try:
        targets = []
        for name in names:
            if name == "logferry":
                cluster = stack.enter_context(
                    LocalCluster(workdir / "logferry", brokers=brokers, kafka={"listen": "127.0.0.1:0"})
                )
                admin = Admin(brokers=cluster.bootstrap)
                stack.callback(admin.close)

                def native_topic(topic: str, admin: Admin = admin) -> None:
                    admin.create_topic(topic, partitions=1, replication_factor=brokers)

                bootstrap = ",".join(b.kafka_address() for b in cluster.brokers)
                targets.append(Target("logferry", bootstrap, native_topic, cluster.broker_pids()))
            else:
                kafka = ApacheKafka(nodes=brokers)
                stack.callback(kafka.stop)
                kafka.start(workdir / "kafka")
                client = AdminClient({"bootstrap.servers": kafka.bootstrap})

                def kafka_topic(topic: str, client: AdminClient = client) -> None:
                    try:
                        client.create_topics([NewTopic(topic, 1, brokers)], operation_timeout=30)[topic].result(60)
                    except KafkaException as exc:
                        raise SystemExit(f"Apache Kafka: creating {topic}: {exc}") from None

                targets.append(Target("Apache Kafka", kafka.bootstrap, kafka_topic, kafka.pids))
            targets[-1].create_topic(WARMUP_TOPIC)
        yield targets
    finally:
        with deferred_signals():
            stack.close()


def table(results: dict[tuple[str, str], list[Outcome]]) -> list[str]:
    """Per system and case: medians, the rate against the system's idempotent median
    and the median of the per-round ratios, broker CPU, the steps of a transaction."""
    lines = [
        f"  {'system':<13} {'case':<26} {'msgs/s':>10} {'vs idem.':>9} {'per round':>10} "
        f"{'broker us/msg':>14} {'flush ms':>9} {'commit ms':>10}"
    ]
    med = statistics.median
    for (name, case), outcomes in results.items():
        base = results[(name, IDEMPOTENT)]
        rate = med(o.rate for o in outcomes)
        per_round = med(o.rate / b.rate for o, b in zip(outcomes, base, strict=True))
        flush = f"{med(o.steps[0] for o in outcomes if o.steps):.1f}" if outcomes[0].steps else "-"
        commit = f"{med(o.steps[1] for o in outcomes if o.steps):.1f}" if outcomes[0].steps else "-"
        lines.append(
            f"  {name:<13} {case:<26} {rate:>10,.0f} {rate / med(b.rate for b in base):>8.0%} {per_round:>9.0%} "
            f"{med(o.broker_cpu_us for o in outcomes):>14.2f} {flush:>9} {commit:>10}"
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--brokers", type=int, default=1, help="brokers; the topics get this replication factor")
    parser.add_argument("--targets", default=",".join(TARGETS), help=f"comma-separated subset of {','.join(TARGETS)}")
    args = parser.parse_args()
    n = args.messages // 1000 * 1000
    names = [name.strip() for name in args.targets.split(",") if name.strip()]
    if not names or set(names) - set(TARGETS) or n < 1000 or args.runs < 1:
        parser.error(f"--targets: a subset of {','.join(TARGETS)}; --messages at least 1000, --runs at least 1")
    if "kafka" in names and (reason := kafka_unavailable()) is not None:
        print(reason, flush=True)
        names.remove("kafka")
        if not names:
            return 0
    results: dict[tuple[str, str], list[Outcome]] = {}

    def body() -> None:
        with tempfile.TemporaryDirectory() as tmp, started(names, Path(tmp), args.brokers) as targets:
            for run in range(args.runs):
                for target in targets if run % 2 == 0 else targets[::-1]:
                    for case in CASES:
                        topic = f"bench-{case.replace(' ', '-')}-{run}"
                        outcome = run_case(target, case, topic, n)
                        results.setdefault((target.name, case), []).append(outcome)
                        extra = ""
                        if outcome.steps is not None:
                            flush, commit = outcome.steps
                            extra = f" (per transaction: flush {flush:.1f} ms, commit_transaction {commit:.1f} ms)"
                        print(
                            f"run {run}: {target.name} {case} {outcome.rate:,.0f} msgs/s, "
                            f"brokers' CPU {outcome.broker_cpu_us:.2f} us/msg{extra}",
                            flush=True,
                        )
        print(
            f"{n} records of {len(VALUE)} B, one partition, {args.brokers} broker(s) and replication factor, "
            f"median of {args.runs} runs ('per round': the median of each round's ratio to its idempotent run):"
        )
        for line in table(results):
            print(line)

    return run_main(body, {}, "every broker is stopped and its data deleted")


if __name__ == "__main__":
    sys.exit(main())
